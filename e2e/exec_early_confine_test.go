package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/sandbox/confine"
)

// A kusaw without kusaw-bridge beside it (go install, a copied binary)
// runs the confinement stage itself: main's package says so
// (sandbox.ServeConfine in its init). kusaw sandbox exec -- CMD without a
// factory file runs from cmd/kusaw/early's init, before main's package
// initialises; it must still run the stage (Landlock, the session
// keyring), not run the command without it. Landlock's scope (ABI 6) is
// what shows from inside: the step cannot signal bwrap's init, pid 1.
// Twin: the same command through main (a setting given) is confined too,
// and both run the command.
func TestSandboxExecEarlyKeepsTheConfinementStage(t *testing.T) {
	needSandbox(t)
	if abi, _ := confine.LandlockABI(); abi < 6 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Landlock ABI %d: its signal scope (ABI 6, Linux 6.12) is what this test sees; CI must run on a kernel that has it", abi)
		}
		t.Skipf("Landlock ABI %d: its signal scope (ABI 6) is what this test sees", abi)
	}
	lone := loneKusaw(t)
	home := t.TempDir()
	dir := t.TempDir()
	script := `echo ran; if kill -0 1 2>/dev/null; then echo signal-reached; else echo signal-refused; fi`
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"early", nil},
		{"main", []string{"KUSAW_LOG_LEVEL=info"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(lone, "sandbox", "exec", "--", "sh", "-c", script)
			cmd.Dir = dir
			cmd.Env = append(testEnv(t, home), c.env...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s%s", err, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), "ran") {
				t.Fatalf("the command did not run: %q\n%s", out.String(), errb.String())
			}
			if !strings.Contains(out.String(), "signal-refused") {
				t.Errorf("the step signalled bwrap's init: it ran without the confinement stage (no Landlock, no session keyring)\n%s", out.String())
			}
		})
	}
}
