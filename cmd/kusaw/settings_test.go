package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kusaw/kusaw/cmd/kusaw/early"
)

// TestSettingsFileLayers: the settings file's keys as kusaw reads them
// without a configuration library: nested and dotted keys, case folded,
// numbers as text, a key without a value counted as not given; a flag
// over the environment over the file over the default; an unknown key
// and bad YAML are errors naming the file.
func TestSettingsFileLayers(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, st := range settingsTable {
		t.Setenv(st.Env, "")
	}
	file := filepath.Join(dir, "kusaw", "config.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Log_Level: debug\nworker:\n  drain_timeout: 90\nlisten:\ncolor: never\n")
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flags.String("listen", "", "")
	flags.String("log-format", "", "")
	if err := flags.Parse([]string{"--log-format", "text"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUSAW_COLOR", "always")
	s, err := loadSettings(flags)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string][2]string{
		"log_level":            {"debug", "file " + file},
		"worker.drain_timeout": {"90", "file " + file},
		"listen":               {"", "unset"},
		"color":                {"always", "env KUSAW_COLOR"},
		"log_format":           {"text", "flag --log-format"},
		"token_file":           {"", "unset"},
	} {
		if got := [2]string{s.values[key], s.source[key]}; got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	write("worker.drain_timeout: 5m\n")
	if s, err := loadSettings(nil); err != nil || s.get("worker.drain_timeout") != "5m" {
		t.Errorf("a dotted key: %v %v", s, err)
	}
	for content, want := range map[string]string{
		"log_levl: debug\n":    `settings file ` + file + `: unknown setting "log_levl" (known: `,
		"worker: {drain: 1}\n": `unknown setting "worker.drain"`,
		"log_level: [a\n":      "settings file " + file + ": While parsing config: yaml:",
		"- a\n":                "While parsing config: yaml: unmarshal errors",
		"log_level: loud\n":    `log_level "loud" (from file ` + file + `) is not one of debug, info, warn, error`,
	} {
		write(content)
		if _, err := loadSettings(nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to hold %q", content, err, want)
		}
	}
	write("")
	if s, err := loadSettings(nil); err != nil || s.get("log_level") != "info" || s.source["log_level"] != "default" {
		t.Errorf("an empty file: %v %v", s, err)
	}
}

// cmd/kusaw/early leaves the command to main when any setting is given:
// it must know every setting's variable.
func TestEarlyKnowsEverySetting(t *testing.T) {
	var envs []string
	for _, st := range settingsTable {
		envs = append(envs, st.Env)
	}
	if !slices.Equal(envs, early.SettingsEnv) {
		t.Errorf("early.SettingsEnv = %v, the settings' variables are %v", early.SettingsEnv, envs)
	}

}
