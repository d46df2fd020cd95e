package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

func sandboxRunCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestSandboxCheckHere(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bubblewrap is not installed: the check needs it")
		}
		t.Skip("bubblewrap is not installed")
	}
	code, out, errs := sandboxRunCLI("sandbox", "check", "--verbose")
	if code != 0 || !strings.Contains(out, "available: yes") || !strings.Contains(out, "backend:   bubblewrap") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"What the sandbox protects:", "What it does not protect:", "Kernel escapes", "~/.ssh", "core.hooksPath", "write-layer: active: an overlay over the worktree can be mounted"} {
		if !strings.Contains(out, want) {
			t.Errorf("--verbose lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = sandboxRunCLI("sandbox", "check", "--json")
	var r map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r["available"] != true || r["version"] == "" {
		t.Fatalf("--json: exit %d %s", code, out)
	}
	if _, ok := r["protects"]; ok {
		t.Errorf("--json without --verbose lists protections")
	}
}

func TestSandboxCheckUnavailable(t *testing.T) {
	old := sandboxCheck
	defer func() { sandboxCheck = old }()
	sandboxCheck = func() sandbox.CheckResult {
		return sandbox.CheckResult{Backend: "bubblewrap", Reason: status.ReasonSandboxNoUserNS,
			Msg: "bubblewrap cannot create its namespaces here: setting up uid map: Permission denied", Fix: status.ReasonSandboxNoUserNS.Info().Fix}
	}
	code, out, _ := sandboxRunCLI("sandbox", "check")
	if code != int(status.ExitSandboxUnavailable) || !strings.Contains(out, "available: no") ||
		!strings.Contains(out, "sandbox.userns_unavailable") || !strings.Contains(out, "fix:") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out, _ = sandboxRunCLI("sandbox", "check", "--json", "--verbose")
	var r map[string]any
	if code != 4 || json.Unmarshal([]byte(out), &r) != nil || r["available"] != false || r["reason"] != "sandbox.userns_unavailable" || r["not_protected"] == nil {
		t.Fatalf("--json: exit %d %s", code, out)
	}
}
