package main

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/kusaw/kusaw/status"
)

// A setting is one of kusaw's own settings (never a factory key: viper
// folds key case, and factory keys are case-sensitive). Each is layered:
// a flag, then its KUSAW_* variable, then the user settings file, then
// the default.
type setting struct {
	Key     string   // in the settings file and in kusaw env
	Env     string   // the environment variable
	Flag    string   // the flag that sets it, "" if none
	Default string   // "" means unset
	Values  []string // the allowed values, nil for any
	Help    string
}

var settingsTable = []setting{
	{Key: "file", Env: "KUSAW_CONFIG", Flag: "file", Help: "the factory file when -f is not given and the current folder has no factory.yaml"},
	{Key: "state_dir", Env: "KUSAW_STATE_DIR", Help: "the state folder, instead of the factory's state_dir"},
	{Key: "log_level", Env: "KUSAW_LOG_LEVEL", Flag: "log-level", Default: "info", Values: []string{"debug", "info", "warn", "error"}, Help: "kusaw serve's log level"},
	{Key: "log_format", Env: "KUSAW_LOG_FORMAT", Flag: "log-format", Default: "json", Values: []string{"json", "text"}, Help: "kusaw serve's log lines: JSON, or text for people"},
	{Key: "color", Env: "KUSAW_COLOR", Default: "auto", Values: []string{"auto", "always", "never"}, Help: "colour in kusaw run's progress; auto: on a terminal, unless NO_COLOR is set"},
	{Key: "listen", Env: "KUSAW_LISTEN", Flag: "listen", Help: "kusaw serve's TCP address, instead of serve.listen"},
	{Key: "token_file", Env: "KUSAW_TOKEN_FILE", Help: "a file holding kusaw serve's bearer token, instead of serve.token in the secret store"},
	{Key: "worker.drain_timeout", Env: "KUSAW_WORKER_DRAIN_TIMEOUT", Flag: "drain-timeout", Default: "10m", Help: "kusaw worker: how long running attempts may finish after SIGTERM or kusaw workers drain before they go back to serve (a duration: 30s, 10m)"},
	{Key: "probe_cache", Env: "KUSAW_PROBE_CACHE", Help: "where kusaw remembers a passed sandbox check (default in the user cache folder); off: check every time"},
}

// settings are the effective values and where each came from.
type settings struct {
	file   string // the settings file (it may not exist)
	values map[string]string
	source map[string]string
}

// settingsFile is $XDG_CONFIG_HOME/kusaw/config.yaml (~/.config when the
// variable is unset).
func settingsFile() string {
	d := os.Getenv("XDG_CONFIG_HOME")
	if d == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		d = filepath.Join(h, ".config")
	}
	return filepath.Join(d, "kusaw", "config.yaml")
}

// loadSettings layers flags (those of flags that are set), the
// environment, the settings file and the defaults. A settings file with an
// unknown key or a bad value is an error naming the file and the key.
func loadSettings(flags *pflag.FlagSet) (*settings, error) {
	v := viper.New()
	s := &settings{file: settingsFile(), values: map[string]string{}, source: map[string]string{}}
	if s.file != "" {
		if _, err := os.Stat(s.file); err == nil {
			v.SetConfigFile(s.file)
			v.SetConfigType("yaml")
			if err := v.ReadInConfig(); err != nil {
				return nil, exitf(status.ExitUsage, "settings file %s: %v", s.file, firstLine(err.Error()))
			}
			for _, k := range v.AllKeys() {
				if !slices.ContainsFunc(settingsTable, func(st setting) bool { return st.Key == k }) {
					return nil, exitf(status.ExitUsage, "settings file %s: unknown setting %q (known: %s)", s.file, k, strings.Join(settingKeys(), ", "))
				}
			}
		}
	}
	for _, st := range settingsTable {
		_ = v.BindEnv(st.Key, st.Env)
		if st.Default != "" {
			v.SetDefault(st.Key, st.Default)
		}
		var fl *pflag.Flag
		if flags != nil && st.Flag != "" {
			fl = flags.Lookup(st.Flag)
			if fl != nil {
				_ = v.BindPFlag(st.Key, fl)
			}
		}
		val := v.GetString(st.Key)
		switch {
		case fl != nil && fl.Changed:
			s.source[st.Key] = "flag --" + st.Flag
		case os.Getenv(st.Env) != "":
			s.source[st.Key] = "env " + st.Env
		case v.InConfig(st.Key):
			s.source[st.Key] = "file " + s.file
		case st.Default != "":
			s.source[st.Key] = "default"
		default:
			s.source[st.Key] = "unset"
		}
		if st.Values != nil && !slices.Contains(st.Values, val) {
			return nil, exitf(status.ExitUsage, "%s %q (from %s) is not one of %s", st.Key, val, s.source[st.Key], strings.Join(st.Values, ", "))
		}
		s.values[st.Key] = val
	}
	return s, nil
}

func settingKeys() []string {
	var ks []string
	for _, st := range settingsTable {
		ks = append(ks, st.Key)
	}
	sort.Strings(ks)
	return ks
}

// get returns a setting's effective value ("" when unset).
func (s *settings) get(key string) string { return s.values[key] }

// settings loads kusaw's settings once per command, with the command's
// own flags layered on top.
func (a *app) settings(flags *pflag.FlagSet) (*settings, error) {
	if a.cfg != nil && flags == nil {
		return a.cfg, nil
	}
	s, err := loadSettings(flags)
	if err != nil {
		return nil, err
	}
	a.cfg = s
	return s, nil
}
