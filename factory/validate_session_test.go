package factory

import (
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

// E062 for continue_session where no session can be continued: Claude
// Code keeps its sessions in its login folder, which the macOS sandbox
// replaces with a fresh HOME per attempt. The twins: the same step on
// Linux, outside the sandbox on macOS, and Codex (its own home) on macOS.
func TestValidateContinueSessionFreshHome(t *testing.T) {
	for _, c := range []struct {
		name, goos, step string
		refused          bool
	}{
		{"claude-code sandboxed on macOS", "darwin", "provider: claude-code, sandbox: {mode: required}", true},
		{"claude-code sandboxed on Linux", "linux", "provider: claude-code, sandbox: {mode: required}", false},
		{"claude-code unsandboxed on macOS", "darwin", `provider: claude-code, sandbox: "off"`, false},
		{"codex sandboxed on macOS", "darwin", "provider: codex, sandbox: {mode: required}", false},
		{"cursor on Linux", "linux", "provider: cursor", true},
	} {
		f := parseFactory(t, "version: 1\nrepos: {}\npipelines: {default: [a]}\nsteps:\n  a: {prompt: go, attempts: 2, continue_session: true, "+c.step+"}\n")
		var got *config.Finding
		for _, x := range continueSessionChecks(f, c.goos) {
			if x.Code == config.ECodeCapMissing && x.Path == "steps.a.continue_session" {
				got = &x
			}
		}
		if (got != nil) != c.refused {
			t.Errorf("%s: E062 %v, want refused=%v", c.name, got, c.refused)
		}
		if got != nil && c.goos == "darwin" && !strings.Contains(got.Message, "fresh HOME") {
			t.Errorf("%s: %s", c.name, got.Message)
		}
	}
}
