// Command kusaw-daemon runs kusaw serve and kusaw worker. It is not run
// by hand: kusaw reads the command line, its settings and the factory,
// then replaces itself with kusaw-daemon and hands over what it decided
// (package internal/daemon). The daemon's code (the queue, the API, the
// cluster, nats-server, prometheus) lives here alone, so no other start
// of kusaw pays for it. It is installed beside kusaw and kusaw-bridge.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/kusaw/kusaw/internal/daemon"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/sandbox/confine"
	"github.com/kusaw/kusaw/status"
)

// Set by make build (-ldflags -X), as kusaw's: a daemon of another build
// than kusaw's is refused.
var version, commit string

func main() {
	// First: what the daemon inherited above stderr reaches none of its
	// steps. The spec's descriptor stays readable here (marked, not closed).
	if err := confine.CloseInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "kusaw: %v\n", err)
		os.Exit(int(status.ExitSandboxUnavailable))
	}
	os.Exit(run(os.Args[1:]))
}

// exitError ends the daemon with a documented exit code and a one-line
// message, as kusaw's commands do.
type exitError struct {
	code status.ExitCode
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitf(code status.ExitCode, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

func run(args []string) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "kusaw: internal error: %v (please report this)\n", r)
			code = int(status.ExitInternal)
		}
	}()
	err := start(args)
	if err == nil {
		return int(status.ExitOK)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(os.Stderr, "kusaw: %s\n", ee.msg)
		}
		return int(ee.code)
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	fmt.Fprintf(os.Stderr, "kusaw: %s\n", msg)
	return int(status.ExitRunFailed)
}

func start(args []string) error {
	if len(args) == 0 {
		return exitf(status.ExitUsage, "%s is started by kusaw serve and kusaw worker, not by hand (run kusaw serve --help)", daemon.Program)
	}
	spec, err := daemon.Read(args)
	if err != nil {
		return exitf(status.ExitUsage, "%v", err)
	}
	if v, c := buildVersion(); v != spec.Version || c != spec.Commit {
		exe, _ := os.Executable()
		return exitf(status.ExitServeUnavailable, "%s at %s is version %s (commit %s) but kusaw at %s is %s (commit %s): install both from one build (make install)",
			daemon.Program, exe, v, orNone(c), spec.Kusaw, spec.Version, orNone(spec.Commit))
	}
	// A copy of kusaw holds each step as its reaper (it answers the reaper's
	// arguments first thing), as it does for kusaw's own runs.
	proc.EnableReaper(spec.Kusaw)
	sandbox.CheckCacheFile = spec.ProbeCache
	// The confinement stage runs as kusaw-bridge beside the daemon, else
	// as kusaw itself (kusaw __confine), never unconfined.
	sandbox.ConfineProgram(spec.Kusaw)
	switch spec.Command {
	case "serve":
		return runServe(spec)
	default:
		return runWorker(spec)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// buildVersion is this binary's version and commit, read as kusaw reads
// its own (cmd/kusaw/version.go).
func buildVersion() (string, string) {
	v, c := version, commit
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
			}
		}
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
	}
	if v == "" {
		v = "devel"
	}
	return v, c
}
