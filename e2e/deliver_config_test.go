package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kusaw init puts factory.yaml in the repository it works on. A sandboxed
// step can edit it (here: switch the sandbox off) or commit files under the
// state folder (a checkout overwrites ignored files), and
// deliver's merge into the checked-out branch would make the step's version
// the factory of every later run. The merge is refused instead; the twin
// pipeline, whose step changes only its own file, is delivered.
func TestDeliverRefusesARunThatChangedTheFactory(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	app := newRepo(t, dir, "app")
	writeFile(t, filepath.Join(app, ".gitignore"), ".kusaw/\n")
	writeFile(t, filepath.Join(app, "factory.yaml"), `version: 1
repos:
  app: {path: .}
sandbox: {mode: required}
pipelines:
  edit:
    steps: [edit]
    deliver: {merge: {into: main}}
  plant:
    steps: [plant]
    deliver: {merge: {into: main}}
  plain:
    steps: [plain]
    deliver: {merge: {into: main}}
steps:
  edit:
    run: [sh, -c, 'sed "s/mode: required/mode: off/" factory.yaml > f.new && cat f.new > factory.yaml && rm f.new 2>&1 || { ls -la; exit 3; }']
  plant:
    run: [sh, -c, ': > .gitignore && mkdir -p .kusaw && echo planted > .kusaw/planted']
  plain:
    run: [sh, -c, 'echo done > work.txt']
`)
	git(t, app, "add", ".")
	git(t, app, "commit", "-q", "-m", "factory")
	before := git(t, app, "rev-parse", "main")

	for _, pl := range []string{"edit", "plant"} {
		res := runKusawIn(t, dir, app, "run", pl)
		if res.code != 0 {
			t.Fatalf("kusaw run %s: exit %d (the run itself succeeds; only delivery fails)\n%s%s\n%s", pl, res.code, res.stdout, res.stderr, stepLogs(t, app))
		}
		if got := git(t, app, "rev-parse", "main"); got != before {
			t.Fatalf("pipeline %s: main moved to the run's commit, which changed kusaw's configuration", pl)
		}
		if f := readFile(t, filepath.Join(app, "factory.yaml")); !strings.Contains(f, "mode: required") {
			t.Fatalf("the checkout's factory.yaml is the step's:\n%s", f)
		}
		if _, err := os.Stat(filepath.Join(app, ".kusaw", "planted")); err == nil {
			t.Fatal("the step's file was written into the state folder")
		}
	}
	var runs []struct {
		Pipeline string `json:"pipeline"`
		Delivery *struct {
			State   string `json:"state"`
			Message string `json:"message"`
		} `json:"delivery"`
	}
	out := runKusawIn(t, dir, app, "runs", "--json")
	if err := json.Unmarshal([]byte(out.stdout), &runs); err != nil {
		t.Fatalf("runs --json: %v\n%s", err, out.stdout)
	}
	want := map[string]string{"edit": "factory.yaml", "plant": ".kusaw/planted"}
	for _, r := range runs {
		if r.Delivery == nil || r.Delivery.State != "failed" || !strings.Contains(r.Delivery.Message, want[r.Pipeline]) || !strings.Contains(r.Delivery.Message, "kusaw's own configuration") {
			t.Fatalf("run of %s: delivery %+v", r.Pipeline, r.Delivery)
		}
	}

	// The twin: a run that leaves the configuration alone is merged.
	if res := runKusawIn(t, dir, app, "run", "plain"); res.code != 0 {
		t.Fatalf("kusaw run plain: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if got := readFile(t, filepath.Join(app, "work.txt")); got != "done\n" {
		t.Fatalf("the plain run was not delivered: work.txt %q", got)
	}
}

// stepLogs is every attempt's stdout and stderr under dir's state folder.
func stepLogs(t *testing.T, dir string) string {
	var b strings.Builder
	ms, _ := filepath.Glob(filepath.Join(dir, ".kusaw", "runs", "*", "steps", "*", "*", "std*.log"))
	for _, m := range ms {
		b.WriteString(m + ":\n" + readFile(t, m))
	}
	return b.String()
}

// runKusawIn is runKusaw in cwd with the test environment of home (whose
// home/ must not lie in a repository the sandbox lays out).
func runKusawIn(t *testing.T, home, cwd string, args ...string) result {
	t.Helper()
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir, cmd.Env = cwd, testEnv(t, home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if code := exitCode(err); code < 0 {
		t.Fatalf("kusaw %v: %v", args, err)
	}
	return result{out.String(), errb.String(), exitCode(err)}
}
