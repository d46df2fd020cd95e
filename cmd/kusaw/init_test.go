package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// TestInitListsPathToolchains: a toolchain on the user's PATH in the home
// (rustup's ~/.cargo/bin, pyenv's shims) is shown read-only by the Linux
// sandbox; init writes it in allow_read, so validate on the file init has
// just written names nothing but the placeholder prompt (W16). Without
// the entry, validate warns W15 for each step.
func TestInitListsPathToolchains(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the toolchain view is the Linux sandbox's")
	}
	old := initSandboxCheck
	initSandboxCheck = func() sandbox.CheckResult { return sandbox.CheckResult{Backend: "bubblewrap", Available: true} }
	defer func() { initSandboxCheck = old }()
	// Not under a temp folder, which the view never takes for a toolchain.
	wd, _ := os.Getwd()
	home, err := os.MkdirTemp(wd, "testhome-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	tools := filepath.Join(home, ".cargo", "bin")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tools, "cargo"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("PATH", tools+":/usr/bin:/bin")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Chdir(dir)
	var out, errb bytes.Buffer
	if code := run([]string{"init", "--sandbox"}, nil, &out, &errb); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errb.String())
	}
	data, _ := os.ReadFile(filepath.Join(dir, "factory.yaml"))
	if !strings.Contains(string(data), "allow_read: ["+tools+"]") {
		t.Fatalf("init did not list %s:\n%s", tools, data)
	}
	out.Reset()
	errb.Reset()
	run([]string{"validate"}, nil, &out, &errb)
	if got := out.String() + errb.String(); strings.Contains(got, "W15") || !strings.Contains(got, "W16") {
		t.Errorf("validate on init's file: want W16 only:\n%s", got)
	}
}
