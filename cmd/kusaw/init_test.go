package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/sandbox"
)

// TestInitSandboxUnavailable: --sandbox on a machine without the backend
// writes mode: off with the reason in the file and on stderr, and the file
// is still valid.
func TestInitSandboxUnavailable(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed")
	}
	old := initSandboxCheck
	initSandboxCheck = func() sandbox.CheckResult {
		return sandbox.CheckResult{Backend: "bubblewrap", Msg: "bwrap is not installed", Fix: "install bubblewrap"}
	}
	defer func() { initSandboxCheck = old }()
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Chdir(dir)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	var out, errb bytes.Buffer
	if code := run([]string{"init", "--sandbox"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	data, _ := os.ReadFile(filepath.Join(dir, "factory.yaml"))
	if !strings.Contains(string(data), "  mode: off") || !strings.Contains(string(data), "bwrap is not installed (install bubblewrap)") {
		t.Errorf("file:\n%s", data)
	}
	if !strings.Contains(errb.String(), "the sandbox is not available here (bwrap is not installed)") {
		t.Errorf("stderr: %q", errb.String())
	}
	if _, fs := config.Parse(data, filepath.Join(dir, "factory.yaml")); len(fs.Errors()) > 0 {
		t.Errorf("invalid: %v", fs.Errors())
	}
}
