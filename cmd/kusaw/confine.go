package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/sandbox/confine"
	"github.com/kusaw/kusaw/status"
)

func init() {
	addCommand("__confine", newConfineCmd)
	addCommand(confine.LayerSubcommand, newLayerCmd)
	// kusaw runs the stage itself when kusaw-bridge is not beside it.
	sandbox.ServeConfine()
}

// newConfineCmd is the hidden first stage inside every Linux sandbox: a
// fresh session keyring and Landlock, then the step. The step's argv
// after "--" reaches it untouched.
func newConfineCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                confine.Subcommand + " [-w PATH]... -- COMMAND [ARG...]",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			err := confine.Run(args)
			var ce *confine.Error
			if errors.As(err, &ce) {
				return exitf(status.ExitCode(ce.Code), "%s", ce.Msg)
			}
			return exitf(status.ExitCode(confine.ExitSetup), "%v", err)
		},
	}
}

// newLayerCmd is the hidden write-layer stage before bwrap, when
// kusaw-bridge is not beside kusaw (confine.RunLayer).
func newLayerCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                confine.LayerSubcommand + " [-l TREE UPPER WORK]... -- BWRAP [ARG...]",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			err := confine.RunLayer(args)
			var ce *confine.Error
			if errors.As(err, &ce) {
				return exitf(status.ExitCode(ce.Code), "%s", ce.Msg)
			}
			return exitf(status.ExitCode(confine.ExitLayer), "%v", err)
		},
	}
}
