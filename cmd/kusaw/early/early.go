// Package early runs kusaw sandbox exec -- CMD without a factory file from
// its init, before the packages of kusaw's other commands initialise
// (net/http, the YAML decoder, cobra, the configuration's validators:
// about half a millisecond that this command never uses; docs/
// benchmarks.md, "Lean start, eleventh pass (issue 25)"). Go initialises
// a package after all it imports and, among those ready, in the order of
// their paths, so this one runs once the sandbox and the standard
// library are ready. Everything it cannot decide alone (a factory file,
// any of kusaw's settings, a failure before the command starts) it leaves
// to main, which then does the whole command as before.
package early

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/sandbox/adhoc"
	"github.com/kusaw/kusaw/sandbox/confine"
	"github.com/kusaw/kusaw/status"
)

// SettingsEnv are the variables of kusaw's settings (cmd/kusaw's
// settingsTable; a test keeps the two lists equal). When one is set, main
// reads the settings and runs the command.
var SettingsEnv = []string{
	"KUSAW_CONFIG", "KUSAW_STATE_DIR", "KUSAW_LOG_LEVEL", "KUSAW_LOG_FORMAT", "KUSAW_COLOR",
	"KUSAW_LISTEN", "KUSAW_TOKEN_FILE", "KUSAW_WORKER_DRAIN_TIMEOUT", "KUSAW_PROBE_CACHE",
}

func init() {
	if !Applies(os.Args[1:]) {
		return
	}
	defer func() {
		// As main's: a line and ExitInternal, not a stack trace.
		if r := recover(); r != nil {
			os.Stderr.WriteString("kusaw: internal error: " + printable(fmt.Sprint(r)) + " (please report this)\n")
			os.Exit(int(status.ExitInternal))
		}
	}()
	if code, ok := run(os.Args[1:]); ok {
		os.Exit(code)
	}
}

// Applies reports whether kusaw's arguments are this package's to run:
// exactly sandbox exec -- CMD..., no factory.yaml here, and none of
// kusaw's settings given (no settings file, none of SettingsEnv), since
// reading either needs the packages this path is there to avoid.
func Applies(args []string) bool {
	if len(args) < 4 || args[0] != "sandbox" || args[1] != "exec" || args[2] != "--" {
		return false
	}
	if _, err := os.Stat("factory.yaml"); err == nil {
		return false
	}
	for _, e := range SettingsEnv {
		if os.Getenv(e) != "" {
			return false
		}
	}
	f := SettingsFile()
	if f == "" {
		return true
	}
	_, err := os.Lstat(f)
	return errors.Is(err, os.ErrNotExist)
}

// SettingsFile is where kusaw's settings file is: $XDG_CONFIG_HOME/kusaw/
// config.yaml, ~/.config when the variable is unset ("" without a home).
func SettingsFile() string {
	d := os.Getenv("XDG_CONFIG_HOME")
	if d == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		d = filepath.Join(h, ".config")
	}
	return filepath.Join(d, "kusaw", "config.yaml")
}

// run is main's work for kusaw's arguments (Applies's): the inherited
// descriptors marked, the walk of /etc and bwrap started ahead, the
// command run. ok is false when main must run it instead (nothing of the
// command has run then, and main will say what went wrong).
func run(args []string) (code int, ok bool) {
	argv := args[3:]
	if confine.CloseInheritedOnExec() != nil {
		return 0, false
	}
	// kusaw serves the confinement stage (its hidden __confine) when
	// kusaw-bridge is not beside it; main's package says so in its init,
	// which has not run yet. Without this, a lone kusaw's step would run
	// with no Landlock and the host's session keyring.
	sandbox.ServeConfine()
	sandbox.WalkSystemAhead()
	adhoc.StartAhead(args)
	defer adhoc.DropAhead()
	code, err := adhoc.Exec(context.Background(), adhoc.Request{Argv: argv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	var we *adhoc.WaitError
	switch {
	case err == nil:
		return code, true
	case errors.As(err, &we):
		os.Stderr.WriteString("kusaw: " + printable(err.Error()) + "\n")
		if code == 0 {
			code = int(status.ExitRunFailed)
		}
		return code, true
	}
	return 0, false
}

// printable keeps a message from moving the terminal: control
// characters become '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}
