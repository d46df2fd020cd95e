// Command kusaw-bridge is the first process inside a Linux sandbox: with
// its first argument __confine it is the confinement stage of every
// sandboxed step (package sandbox/confine); otherwise, with network:
// allowlist, the egress bridge (package egress/bridge). It is installed
// beside kusaw and does what kusaw __confine and kusaw __egress-bridge
// do, without starting the whole of kusaw first.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/kusaw/kusaw/egress/bridge"
	"github.com/kusaw/kusaw/sandbox/confine"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == confine.Subcommand {
		err := confine.Run(os.Args[2:])
		code := confine.ExitSetup
		var ce *confine.Error
		if errors.As(err, &ce) {
			code = ce.Code
		}
		fmt.Fprintf(os.Stderr, "kusaw: %v\n", err)
		os.Exit(code)
	}
	err := bridge.Run(os.Args[1:])
	var be *bridge.Error
	code := bridge.ExitHandOver
	if errors.As(err, &be) {
		code = be.Code
	}
	fmt.Fprintf(os.Stderr, "kusaw: %v\n", err)
	os.Exit(code)
}
