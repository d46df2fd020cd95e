package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunsShowsTrigger: kusaw runs names what started each run, with the
// forge's text neutralised for the terminal.
func TestRunsShowsTrigger(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", filepath.Join(dir, "app")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte("version: 1\nrepos:\n  app: {path: app}\npipelines:\n  default: [a]\nsteps:\n  a: {run: [\"true\"]}\n"), 0o644)
	for id, body := range map[string]string{
		"20261201-100000-aaaa": `{"id":"20261201-100000-aaaa","pipeline":"default","state":"succeeded","created":"2026-12-01T10:00:00Z","repos":[],"steps":[],"trigger":{"name":"fix","forge":"github","repo":"acme/app\u001b[31m","issue":5}}`,
		"20261201-100001-bbbb": `{"id":"20261201-100001-bbbb","pipeline":"default","state":"succeeded","created":"2026-12-01T10:00:01Z","repos":[],"steps":[],"trigger":{"name":"nightly","schedule":"0 3 * * *"}}`,
	} {
		d := filepath.Join(dir, ".kusaw", "runs", id)
		os.MkdirAll(d, 0o700)
		os.WriteFile(filepath.Join(d, "run.json"), []byte(body), 0o600)
	}
	code, out, errOut := runKusaw("runs", "-f", filepath.Join(dir, "factory.yaml"))
	if code != 0 {
		t.Fatalf("kusaw runs: %d %s %s", code, out, errOut)
	}
	for _, want := range []string{"TRIGGER", "github acme/app", "#5", "schedule nightly"} {
		if !strings.Contains(out, want) {
			t.Errorf("kusaw runs lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("a control character from the forge reached the terminal: %q", out)
	}
}
