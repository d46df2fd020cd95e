package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func init() { addCommand("env", newEnvCmd) }

func newEnvCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "env [--json]",
		Short: "print kusaw's own settings, each with its effective value and where it came from",
		Long: `kusaw's own settings (not the factory's: those live in factory.yaml) are
layered: a flag, then the KUSAW_* environment variable, then the user
settings file ($XDG_CONFIG_HOME/kusaw/config.yaml, else
~/.config/kusaw/config.yaml), then the default. The settings file is YAML
with the keys below, for example:

    log_level: debug
    color: never

The factory file is -f, else factory.yaml in the current folder, else the
file setting. An unknown key or a bad value in the settings file is an
error that names the file and the key (exit 2).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return a.env(newPrinter(a.stdout, asJSON, printSettings)) },
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the settings as JSON")
	return c
}

// settingsReport is kusaw env --json: each setting with its value and
// where it came from.
type settingsReport struct {
	SettingsFile string       `json:"settings_file"`
	Settings     []settingRow `json:"settings"`
}

type settingRow struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`
	Env    string `json:"env"`
	Help   string `json:"help"`
}

// env is kusaw env: kusaw's own settings, printed.
func (a *app) env(p printer[settingsReport]) error {
	cfg, err := a.settings(nil)
	if err != nil {
		return err
	}
	rep := settingsReport{SettingsFile: cfg.file}
	for _, st := range settingsTable {
		r := settingRow{Key: st.Key, Value: cfg.get(st.Key), Source: cfg.source[st.Key], Env: st.Env, Help: st.Help}
		if st.Key == "file" {
			// The file actually used, which a factory.yaml here decides
			// before the setting.
			if p, src, err := a.factoryPathSource(); err == nil {
				r.Value, r.Source = p, src
			}
		}
		rep.Settings = append(rep.Settings, r)
	}
	p.Print(rep)
	return nil
}

// printSettings is kusaw env's text: KEY=VALUE lines with their source.
func printSettings(w io.Writer, rep settingsReport) {
	fmt.Fprintf(w, "# settings file: %s\n", rep.SettingsFile)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rep.Settings {
		fmt.Fprintf(tw, "%s=%s\t# %s\t%s\n", r.Key, quoteIfNeeded(r.Value), r.Source, r.Env)
	}
	_ = tw.Flush()
}

// quoteIfNeeded quotes values with spaces or nothing, so each line reads
// back as KEY=VALUE.
func quoteIfNeeded(s string) string {
	for _, r := range s {
		if r == ' ' || r == '\t' || r == '"' || r == '#' {
			return fmt.Sprintf("%q", s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}
