package providers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/status"
)

// plantCLI writes a claude that leaves a marker whenever it runs (what a
// step that rewrote the CLI would plant) and prints Claude Code's version.
func plantCLI(t *testing.T, path, marker string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho ran >> " + marker + "\necho '2.1.0 (Claude Code)'\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func wantWritableRefusal(t *testing.T, err error, marker, dir string) {
	t.Helper()
	var se *status.Error
	if !errors.As(err, &se) || se.Reason != status.ReasonProviderWritable || !strings.Contains(se.Msg, "lies in "+dir) || !strings.Contains(se.Fix, "providers.claude-code.command") {
		t.Fatalf("want provider.writable_cli naming %s, got %v", dir, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("kusaw ran the CLI planted where a sandbox writes")
	}
}

// The attack of issue 24, finding 1: a step rewrote the CLI in the login
// folder (~/.claude/local/claude, Claude Code's "local" install); kusaw's
// probe must not run it on the host, whether it is named, found on PATH
// or reached through a link from outside. The twins: the same CLI outside
// every writable folder is probed (and runs).
func TestProbeRefusesCLIInWritableFolder(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("CLAUDE_CONFIG_DIR", "")
	marker := filepath.Join(t.TempDir(), "ran")
	planted := filepath.Join(home, ".claude", "local", "claude")
	plantCLI(t, planted, marker)
	ctx := context.Background()

	_, err := Prepare(ctx, PrepareInput{Provider: "claude-code", Step: "s", Command: planted, Prompt: "p", StepEnv: []string{"CLAUDE_CODE_OAUTH_TOKEN"}})
	wantWritableRefusal(t, err, marker, filepath.Join(home, ".claude"))

	// Found on PATH: refused, not passed over for the next one.
	outside := filepath.Join(t.TempDir(), "bin")
	plantCLI(t, filepath.Join(outside, "claude"), filepath.Join(t.TempDir(), "outside-ran"))
	t.Setenv("PATH", filepath.Dir(planted)+":"+outside+":/usr/bin:/bin")
	_, err = probeAvoiding(ctx, claudeSpec, "", nil)
	wantWritableRefusal(t, err, marker, filepath.Join(home, ".claude"))

	// Through a link from a folder no sandbox writes.
	link := filepath.Join(t.TempDir(), "claude")
	if err := os.Symlink(planted, link); err != nil {
		t.Fatal(err)
	}
	_, err = probeAvoiding(ctx, claudeSpec, link, nil)
	wantWritableRefusal(t, err, marker, filepath.Join(home, ".claude"))

	// A folder the factory's sandboxes write (allow_write, a cache).
	shared := t.TempDir()
	inShared := filepath.Join(shared, "tools", "claude")
	plantCLI(t, inShared, marker)
	_, err = Prepare(ctx, PrepareInput{Provider: "claude-code", Step: "s", Command: inShared, Prompt: "p", StepEnv: []string{"CLAUDE_CODE_OAUTH_TOKEN"}, Writable: []string{shared}})
	wantWritableRefusal(t, err, marker, shared)

	// Twins: outside every writable folder the CLI is probed.
	okMarker := filepath.Join(t.TempDir(), "ran")
	good := filepath.Join(t.TempDir(), "claude")
	plantCLI(t, good, okMarker)
	prep, err := Prepare(ctx, PrepareInput{Provider: "claude-code", Step: "s", Command: good, Prompt: "p", StepEnv: []string{"CLAUDE_CODE_OAUTH_TOKEN"}, Writable: []string{shared}})
	if err != nil || prep.Probe.Version != "2.1.0" {
		t.Fatalf("a CLI outside every writable folder: %+v %v", prep.Probe, err)
	}
	if _, err := os.Stat(okMarker); err != nil {
		t.Fatal("the legitimate CLI's --version did not run")
	}
	if pr, err := probeAvoiding(ctx, claudeSpec, inShared, nil); err != nil || pr.Version != "2.1.0" {
		t.Fatalf("a CLI in a folder no sandbox of this factory writes: %+v %v", pr, err)
	}
}
