package main

import "github.com/spf13/cobra"

func init() { addCommand("sandbox", newSandboxCmd) }

// sandboxSubcommands is filled by the init of each sandbox_*.go file, so a
// new subcommand (exec, doctor) never edits this file.
var sandboxSubcommands []func(*app) *cobra.Command

func newSandboxCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "sandbox",
		Short: "the OS sandbox: can this machine run it, what a step's sandbox is, run a command in it",
	}
	for _, f := range sandboxSubcommands {
		c.AddCommand(f(a))
	}
	return c
}
