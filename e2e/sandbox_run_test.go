package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
)

// needSandbox skips (fails in CI) when bwrap cannot run here.
func needSandbox(t *testing.T) {
	t.Helper()
	if res := sandbox.Check(); !res.Available {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the sandbox backend is unavailable: %s (%s)", res.Msg, res.Fix)
		}
		t.Skipf("the sandbox backend is unavailable: %s", res.Msg)
	}
}

func TestPipelineSandboxedStepsAndBuiltin(t *testing.T) {
	needSandbox(t)
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
  lib: {path: ./lib, sandbox: required}
pipelines:
  default: [edit, diff]
steps:
  edit:
    sandbox: required
    run: [sh, -c, 'echo edited > edited.txt && echo art > "$KUSAW_ARTIFACTS/a.txt" && echo tmp > "$TMPDIR/t" && (echo x > "$MAIN/escape.txt" 2>/dev/null && echo ESCAPED || echo blocked)']
    env: {MAIN: `+"MAINDIR"+`}
  diff:
    builtin: diff
`, "app", "lib")
	// The step is told where the main checkout is, and must fail to write it.
	yaml := strings.ReplaceAll(readFile(t, filepath.Join(dir, "factory.yaml")), "MAINDIR", filepath.Join(dir, "app"))
	writeFile(t, filepath.Join(dir, "factory.yaml"), yaml)
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "edit", "1")
	if out := readFile(t, filepath.Join(adir, "stdout.log")); out != "blocked\n" {
		t.Errorf("write to the main checkout from the sandbox: %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "app", "escape.txt")); err == nil {
		t.Fatal("the sandboxed step wrote into the main checkout")
	}
	if readFile(t, filepath.Join(adir, "artifacts", "a.txt")) != "art\n" {
		t.Error("artifacts/ not writable in the sandbox")
	}
	if got := git(t, filepath.Join(dir, "app"), "show", "kusaw/"+id+":edited.txt"); got != "edited" {
		t.Errorf("the worktree write was not committed: %q", got)
	}
	// The plan is in the record and in the events.
	var rec struct {
		Mode       string `json:"mode"`
		ModeOrigin string `json:"mode_origin"`
		Processes  []struct {
			Sandbox *struct {
				Backend string `json:"backend"`
				Network string `json:"network"`
			} `json:"sandbox_plan"`
		} `json:"processes"`
	}
	json.Unmarshal([]byte(readFile(t, filepath.Join(adir, "attempt.json"))), &rec)
	if rec.Mode != "required" || rec.ModeOrigin != "step:edit" || rec.Processes[0].Sandbox == nil || rec.Processes[0].Sandbox.Backend != "bubblewrap" {
		t.Errorf("attempt record: %+v", rec)
	}
	if !strings.Contains(readFile(t, filepath.Join(adir, "events.jsonl")), `"type":"sandbox.plan"`) {
		t.Error("no sandbox.plan event")
	}
	// The diff built-in ran as `kusaw __builtin diff` inside the sandbox
	// (repo lib requires it) and wrote the patch of the run so far.
	ddir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "diff", "1")
	if !strings.Contains(readFile(t, filepath.Join(ddir, "attempt.json")), `"mode": "required"`) {
		t.Error("the diff step did not run sandboxed")
	}
	patch := readFile(t, filepath.Join(ddir, "artifacts", "app.patch"))
	if !strings.Contains(patch, "+edited") {
		t.Errorf("app.patch: %q", patch)
	}
	if st := readFile(t, filepath.Join(ddir, "artifacts", "app.diffstat")); !strings.Contains(st, "1 file changed") {
		t.Errorf("app.diffstat: %q", st)
	}
}

func TestSecretNeverInRunFiles(t *testing.T) {
	const secret = "s3cr3t-VALUE-71c2d9"
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [open, boxed]
steps:
  open:
    env: {TOKEN: {secret: steps.open.env.TOKEN}}
    run: [sh, -c, 'case "$TOKEN" in s3cr3t-*) ;; *) exit 9;; esac; echo "token $TOKEN"; echo "token $TOKEN" >&2']
  boxed:
    sandbox: required
    env: {TOKEN: {secret: steps.open.env.TOKEN}}
    run: [sh, -c, 'case "$TOKEN" in s3cr3t-*) ;; *) exit 9;; esac; echo "token $TOKEN"; echo "$TOKEN" >&2; exit 2']
`, "app")
	if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("steps.open.env.TOKEN", secret); err != nil {
		t.Fatal(err)
	}
	if sandbox.Check().Available == false {
		// Without the backend the boxed step is refused; the open one still
		// proves the point.
		yaml := strings.Replace(readFile(t, filepath.Join(dir, "factory.yaml")), "sandbox: required", "sandbox: off", 1)
		writeFile(t, filepath.Join(dir, "factory.yaml"), yaml)
	}
	res := runKusaw(t, dir, "run", "--json")
	if res.code != 1 {
		t.Fatalf("kusaw run exit %d, want 1 (boxed exits 2)\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "open", "1", "stdout.log"))
	if out != "token <secret>\n" {
		t.Errorf("stdout.log = %q (the step did not get the secret, or it was not redacted)", out)
	}
	var outputs bytes.Buffer
	outputs.WriteString(res.stdout + res.stderr)
	for _, args := range [][]string{{"show", id}, {"show", id, "--json"}, {"logs", id}, {"logs", id, "--events"}, {"runs", "--json"}} {
		r := runKusaw(t, dir, args...)
		outputs.WriteString(r.stdout + r.stderr)
	}
	if strings.Contains(outputs.String(), secret) {
		t.Error("the secret appears in kusaw's output")
	}
	filepath.Walk(filepath.Join(dir, ".kusaw"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if bytes.Contains([]byte(readFile(t, p)), []byte(secret)) {
				t.Errorf("the secret appears in %s", p)
			}
		}
		return nil
	})
	verifyRecords(t, os.Geteuid(), dir)
}
