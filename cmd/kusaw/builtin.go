package main

import (
	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
)

func init() { addCommand("__builtin", newBuiltinCmd) }

// newBuiltinCmd is the hidden entry point of built-in steps: the engine
// runs them as `kusaw __builtin NAME` so a sandbox wraps them like any step.
func newBuiltinCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:    "__builtin NAME",
		Short:  "run a built-in step (used by kusaw itself)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			code := steps.RunBuiltin(args[0], steps.EnvFromOS(), a.stdout, a.stderr)
			if code != 0 {
				return silentExit(status.ExitCode(code))
			}
			return nil
		},
	}
}
