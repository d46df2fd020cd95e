// Package confine is the first stage inside a Linux sandbox, after bwrap
// has built the view and installed the seccomp filter and before the
// step's own program: it gives the step a fresh session keyring (so the
// host's is neither inherited nor reachable) and, where the kernel has
// Landlock, restricts writes to the plan's writable paths and scopes
// signals and abstract Unix sockets to the sandbox. Then it replaces
// itself with the step's command.
//
// It runs as `kusaw __confine` or `kusaw-bridge __confine` (the small
// binary beside kusaw, which starts in a fraction of kusaw's time), and
// imports nothing of kusaw's. kusaw-bridge built with cgo does the same
// in C before its Go runtime starts (cmd/kusaw-bridge/stage_cgo.go); this
// package is the stage everywhere else and the one the bridge applies
// after its hand-over.
package confine

import "fmt"

// Subcommand is the argument that selects the stage in kusaw and
// kusaw-bridge.
const Subcommand = "__confine"

// Exit statuses when the step could not start (those of env(1) and the
// egress bridge).
const (
	ExitSetup    = 125 // the keyring or Landlock could not be set up
	ExitNoExec   = 126 // the command exists but cannot be run
	ExitNotFound = 127 // the command is not on PATH
)

// Error is a failure before the step runs; Code is the exit status.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

const usage = "usage: __confine [-w WRITABLE_PATH]... -- COMMAND [ARG...]"

// Spec is what the stage applies.
type Spec struct {
	Writable []string // paths writes may reach (beneath them); every other write is refused by Landlock
	Argv     []string
}

// Args is the argv of the stage for spec, after the program (and its
// subcommand): the flags, "--" and the command.
func Args(writable []string) []string {
	var a []string
	for _, w := range writable {
		a = append(a, "-w", w)
	}
	return append(a, "--")
}

// Parse reads the stage's arguments.
func Parse(args []string) (Spec, error) {
	var s Spec
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-w":
			if i+1 >= len(args) {
				return s, &Error{ExitSetup, "confine: -w needs a path (" + usage + ")"}
			}
			s.Writable = append(s.Writable, args[i+1])
			i++
		case "--":
			s.Argv = args[i+1:]
			if len(s.Argv) == 0 {
				return s, &Error{ExitSetup, "confine: no command after -- (" + usage + ")"}
			}
			return s, nil
		default:
			return s, &Error{ExitSetup, fmt.Sprintf("confine: unknown argument %q (%s)", a, usage)}
		}
	}
	return s, &Error{ExitSetup, "confine: no -- before the command (" + usage + ")"}
}
