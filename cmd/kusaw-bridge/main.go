// Command kusaw-bridge is the first process inside a Linux sandbox: with
// its first argument __confine it is the confinement stage of every
// sandboxed step (package sandbox/confine); otherwise, with network:
// allowlist, the egress bridge (package egress/bridge). It is installed
// beside kusaw and does what kusaw __confine and kusaw __egress-bridge
// do, without starting the whole of kusaw first. With __layer it mounts
// an attempt's write layers before bwrap starts (confine.RunLayer).
//
// When the stage's command is this same program's bridge (an allowlist
// step: `kusaw-bridge __confine -w PATH... -- kusaw-bridge --lease ...
// -- STEP`), the stage does not exec it again: it runs the bridge itself
// and confines after the hand-over, right before the step's exec. One Go
// program starts instead of two (the figures: docs/benchmarks.md). Built
// with cgo, the stage for any other command runs in C before the Go
// runtime starts (stage_cgo.go), and this Go code only when that stage
// leaves it the work.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/kusaw/kusaw/egress/bridge"
	"github.com/kusaw/kusaw/sandbox/confine"
)

func main() {
	// The step sees no descriptor this program inherited above stderr
	// (confine.CloseInheritedOnExec), except through the write layer's stage,
	// which passes bwrap the ones kusaw gave it (--args, the filter).
	if len(os.Args) < 2 || os.Args[1] != confine.LayerSubcommand {
		if err := confine.CloseInheritedOnExec(); err != nil {
			exit(&confine.Error{Code: confine.ExitSetup, Msg: err.Error()})
		}
	}
	if len(os.Args) > 1 && os.Args[1] == confine.Subcommand {
		exit(stage(os.Args[2:]))
	}
	// The write layer's stage, outside the sandbox before bwrap: built
	// with cgo, the constructor in stage_cgo.go does it and this runs only
	// for what that one leaves to it (a failure to report, mostly).
	if len(os.Args) > 1 && os.Args[1] == confine.LayerSubcommand {
		exit(confine.RunLayer(os.Args[2:]))
	}
	exit(bridge.Run(os.Args[1:]))
}

// stage runs the confinement stage, with the bridge in this process when
// the stage's command is this program's bridge.
func stage(args []string) error {
	s, err := confine.Parse(args)
	if err != nil {
		return err
	}
	if !isOwnBridge(s.Argv) {
		return confine.Run(args)
	}
	return bridge.RunThen(s.Argv[1:], func() error { return confine.Apply(s.Writable) })
}

// isOwnBridge says whether argv runs this very program as the bridge, as
// bridge.Argv writes it (the lease first).
func isOwnBridge(argv []string) bool {
	if len(argv) < 2 || argv[1] != "--lease" {
		return false
	}
	if argv[0] == os.Args[0] {
		return true
	}
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return false
	}
	other, err := os.Stat(argv[0])
	return err == nil && os.SameFile(self, other)
}

// exit ends with the failure's exit status: the stage's (125, 126, 127)
// or the bridge's, which are the same numbers.
func exit(err error) {
	code := bridge.ExitHandOver
	var ce *confine.Error
	var be *bridge.Error
	switch {
	case errors.As(err, &ce):
		code = ce.Code
	case errors.As(err, &be):
		code = be.Code
	}
	fmt.Fprintf(os.Stderr, "kusaw: %v\n", err)
	os.Exit(code)
}
