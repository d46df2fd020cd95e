package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("__probe", newProbeCmd) }

// newProbeCmd is the hidden program kusaw sandbox doctor runs inside a
// step's sandbox: it tries what P3–P8 need and prints one result line.
func newProbeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:    "__probe SPEC-JSON",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var spec factory.ProbeSpec
			if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
				return exitf(status.ExitUsage, "__probe: the spec is not valid JSON: %v", err)
			}
			if err := factory.RunProbe(spec, a.stdout); err != nil {
				return exitf(status.ExitRunFailed, "__probe: %v", err)
			}
			return nil
		},
	}
}
