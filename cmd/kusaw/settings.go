package main

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/kusaw/kusaw/cmd/kusaw/early"
	"github.com/kusaw/kusaw/status"
)

// A setting is one of kusaw's own settings (never a factory key: the
// settings file's keys are folded to lower case, and factory keys are
// case-sensitive). Each is layered:
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
// variable is unset); cmd/kusaw/early looks for it there too.
func settingsFile() string { return early.SettingsFile() }

// loadSettings layers flags (those of flags that are set), the
// environment, the settings file and the defaults. A settings file with an
// unknown key or a bad value is an error naming the file and the key.
//
// The file is read with the YAML decoder kusaw links anyway, not a
// configuration library: every process of kusaw pays for the packages it
// links at its start (docs/benchmarks.md, "Lean start, fifth pass (issue 25)").
func loadSettings(flags *pflag.FlagSet) (*settings, error) {
	s := &settings{file: settingsFile(), values: map[string]string{}, source: map[string]string{}}
	var file map[string]fileValue
	if s.file != "" {
		if data, err := os.ReadFile(s.file); err == nil {
			if file, err = parseSettingsFile(data); err != nil {
				return nil, exitf(status.ExitUsage, "settings file %s: %v", s.file, firstLine(err.Error()))
			}
			for k := range file {
				if !slices.ContainsFunc(settingsTable, func(st setting) bool { return st.Key == k }) {
					return nil, exitf(status.ExitUsage, "settings file %s: unknown setting %q (known: %s)", s.file, k, strings.Join(settingKeys(), ", "))
				}
			}
		}
	}
	for _, st := range settingsTable {
		var fl *pflag.Flag
		if flags != nil && st.Flag != "" {
			fl = flags.Lookup(st.Flag)
		}
		fv, inFile := file[st.Key]
		inFile = inFile && fv.set
		var val string
		switch {
		case fl != nil && fl.Changed:
			val, s.source[st.Key] = fl.Value.String(), "flag --"+st.Flag
		case os.Getenv(st.Env) != "":
			val, s.source[st.Key] = os.Getenv(st.Env), "env "+st.Env
		case inFile:
			val, s.source[st.Key] = fv.value, "file "+s.file
		case st.Default != "":
			val, s.source[st.Key] = st.Default, "default"
		default:
			s.source[st.Key] = "unset"
			if fl != nil {
				val = fl.Value.String() // the flag's own default
			}
		}
		if st.Values != nil && !slices.Contains(st.Values, val) {
			return nil, exitf(status.ExitUsage, "%s %q (from %s) is not one of %s", st.Key, val, s.source[st.Key], strings.Join(st.Values, ", "))
		}
		s.values[st.Key] = val
	}
	return s, nil
}

// fileValue is one key of the settings file: set is false for a key
// written without a value (it counts as known, and as not given).
type fileValue struct {
	value string
	set   bool
}

// parseSettingsFile reads the settings file's YAML into its keys, folded to
// lower case, nested mappings joined by dots (worker: {drain_timeout: 5m}
// is worker.drain_timeout), scalars as their text.
func parseSettingsFile(data []byte) (map[string]fileValue, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("While parsing config: %w", err)
	}
	out := map[string]fileValue{}
	var flatten func(prefix string, m map[string]any)
	flatten = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := prefix + strings.ToLower(k)
			switch v := v.(type) {
			case map[string]any:
				flatten(key+".", v)
			case nil:
				out[key] = fileValue{}
			case string:
				out[key] = fileValue{v, true}
			case bool:
				out[key] = fileValue{strconv.FormatBool(v), true}
			case int:
				out[key] = fileValue{strconv.Itoa(v), true}
			case float64:
				out[key] = fileValue{strconv.FormatFloat(v, 'f', -1, 64), true}
			case []any, map[any]any:
				out[key] = fileValue{"", true} // not a value a setting takes
			default:
				out[key] = fileValue{fmt.Sprint(v), true}
			}
		}
	}
	flatten("", doc)
	return out, nil
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
