package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/sandbox"
)

// On macOS, check --verbose prints the Seatbelt backend's own lists: what
// it protects and its limits (process listing, detached processes, the
// allow list of system services, the first-run checklist). The result is
// stubbed so this runs on Linux.
func TestSandboxCheckVerboseSeatbelt(t *testing.T) {
	old := sandboxCheck
	defer func() { sandboxCheck = old }()
	sandboxCheck = func() sandbox.CheckResult {
		return sandbox.CheckResult{Backend: "seatbelt", Path: sandbox.SandboxExecPath, Available: true}
	}
	code, out, errs := sandboxRunCLI("sandbox", "check", "--verbose")
	if code != 0 || !strings.Contains(out, "backend:   seatbelt") || !strings.Contains(out, "/usr/bin/sandbox-exec") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"Process listing", "Detached processes", "allow list", "Keychain", "fresh, empty HOME", "loopback port",
		"no DNS", "DiskArbitration", "data volume", "task ports", "trustd", `"kusaw"`, "first-run checklist"} {
		if !strings.Contains(out, want) {
			t.Errorf("--verbose on macOS lacks %q:\n%s", want, out)
		}
	}
	for _, linuxOnly := range []string{"namespaces", "bwrap"} {
		if strings.Contains(out, linuxOnly) {
			t.Errorf("--verbose on macOS prints the Linux list (%q):\n%s", linuxOnly, out)
		}
	}
	code, out, _ = sandboxRunCLI("sandbox", "check", "--json", "--verbose")
	var r struct {
		Backend      string   `json:"backend"`
		NotProtected []string `json:"not_protected"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Backend != "seatbelt" ||
		!strings.Contains(strings.Join(r.NotProtected, "\n"), "Detached processes") {
		t.Fatalf("--json --verbose: exit %d %s", code, out)
	}
}
