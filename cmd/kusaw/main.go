// Command kusaw is a software factory's step executor. This package only
// parses flags and prints; the work is done by the packages it calls.
package main

import (
	"os"

	// kusaw sandbox exec -- CMD without a factory file runs from its
	// init, before the packages below initialise; when it does not,
	// main runs it as any other command.
	_ "github.com/kusaw/kusaw/cmd/kusaw/early"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/sandbox/adhoc"
	"github.com/kusaw/kusaw/sandbox/confine"
	"github.com/kusaw/kusaw/status"
)

func main() {
	// First, before anything starts a process (the reaper's child, the
	// early bwrap below): what kusaw's parent left open reaches no step.
	closeInheritedOnExec(os.Args)
	// A copy of kusaw started as a step's reaper does only that.
	proc.MaybeReap(os.Args)
	if sandboxExecArgs(os.Args[1:]) {
		// Its plan's walk of /etc overlaps the flags, the settings and
		// the backend check.
		sandbox.WalkSystemAhead()
		// Its bwrap starts now, to be given the plan's options when
		// they are ready (adhoc.StartAhead).
		adhoc.StartAhead(os.Args[1:])
	}
	if exe, err := os.Executable(); err == nil {
		proc.EnableReaper(exe)
	}
	code := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	adhoc.DropAhead() // a bwrap started early and not used leaves no process
	os.Exit(code)
}

// sandboxExecArgs reports whether args are kusaw sandbox exec's (before
// the command's own, after --). A wrong guess costs one walk of /etc.
func sandboxExecArgs(args []string) bool {
	for i := 0; i+1 < len(args) && args[i] != "--"; i++ {
		if args[i] == "sandbox" && args[i+1] == "exec" {
			return true
		}
	}
	return false
}

// closeInheritedOnExec marks every descriptor kusaw inherited above stderr
// close-on-exec (confine.CloseInheritedOnExec), or ends kusaw: a step must not
// start with them. The write layer's stage (kusaw __layer) is the
// exception: it execs bwrap with the descriptors kusaw gave it (--args,
// the filter), and kusaw itself marked all others when it started.
func closeInheritedOnExec(args []string) {
	if len(args) > 1 && args[1] == confine.LayerSubcommand {
		return
	}
	if err := confine.CloseInheritedOnExec(); err != nil {
		os.Stderr.WriteString("kusaw: " + err.Error() + "\n")
		os.Exit(int(status.ExitSandboxUnavailable))
	}
}
