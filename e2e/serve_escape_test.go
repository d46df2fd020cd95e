package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sandboxed step must not reach kusaw serve's API: through it, it could
// queue a pipeline whose steps are not sandboxed. The attack: a step of a
// run that serve executes connects to serve's socket and submits a run.
// The twin: the same request from outside the sandbox is served.
func TestServeSocketHiddenFromSteps(t *testing.T) {
	need(t, "bwrap")
	need(t, "curl")
	need(t, "git")
	// Outside /tmp: the sandbox's /tmp is private, which would hide the
	// socket whatever kusaw does.
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	newRepo(t, dir, "app")
	sock := filepath.Join(dir, ".kusaw", "serve", "serve.sock")
	writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
sandbox: {mode: required}
pipelines:
  default: [probe]
  evil: [evil]
steps:
  probe:
    run: [sh, -c, 'curl -sS --max-time 5 --unix-socket "$0" -H "Content-Type: application/json" -d "{\"pipeline\":\"evil\"}" http://serve/v1/runs && echo REACHED-SERVE; true', "`+sock+`"]
  evil:
    run: [sh, -c, "echo evil ran"]
    sandbox: "off"
`)
	sp := startServe(t, dir)
	r := runKusaw(t, dir, "run")
	if r.code != 0 {
		t.Fatalf("kusaw run: %d\n%s%s\n%s", r.code, r.stdout, r.stderr, sp.stderr.String())
	}
	runs, err := sp.client.Runs()
	if err != nil {
		t.Fatal(err)
	}
	for _, rr := range runs {
		if rr.Pipeline == "evil" {
			t.Fatalf("a sandboxed step queued the unsandboxed pipeline evil through serve")
		}
	}
	out := ""
	entries, _ := filepath.Glob(filepath.Join(dir, ".kusaw", "runs", "*", "steps", "probe", "1", "*.log"))
	for _, e := range entries {
		out += readFile(t, e)
	}
	if strings.Contains(out, "REACHED-SERVE") || !strings.Contains(out, "curl") {
		t.Fatalf("the step reached serve's socket (or never tried):\n%s", out)
	}
	// Twin: from outside, the same request is served.
	c := runKusaw(t, dir, "run", "evil")
	if c.code != 0 || !strings.Contains(c.stdout+c.stderr, "evil") {
		t.Fatalf("the legitimate run of evil through serve failed: %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	verifyRecords(t, os.Geteuid(), dir)
}
