package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("__egress-bridge", newEgressBridgeCmd) }

// newEgressBridgeCmd is the hidden first process inside a Linux sandbox
// with network: allowlist. Flags are parsed by egress.RunBridge so the
// step's argv after "--" reaches it untouched.
func newEgressBridgeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                "__egress-bridge --lease SOCKET --listen 127.0.0.1:PORT -- COMMAND [ARG...]",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			err := egress.RunBridge(args)
			var be *egress.BridgeError
			if errors.As(err, &be) {
				return exitf(status.ExitCode(be.Code), "%s", be.Msg)
			}
			return exitf(status.ExitCode(egress.BridgeExitHandOver), "egress bridge: %v", err)
		},
	}
}
