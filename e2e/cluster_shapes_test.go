package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// clusterShapesYAML: candidates with a judge, then a parallel group whose
// members conflict and a resolve step that finishes the merge, with no
// local worker: every attempt must run on a worker.
func clusterShapesYAML(sandbox string) string {
	readOnly := ""
	if sandbox == "required" {
		readOnly = ` && ! touch "$KUSAW_CANDIDATE_2/x" 2>/dev/null`
	}
	return `version: 1
repos:
  app: {path: app}
serve:
  cluster: {listen: "127.0.0.1:0", local_worker: false, lost_after: 15s}
pipelines:
  default: [tryj, [one, two]]
steps:
  tryj:
    sandbox: ` + sandbox + `
    candidates: 3
    select: judge:pick
    run: [sh, -c, 'echo $KUSAW_CANDIDATE > pick.txt']
  pick:
    sandbox: ` + sandbox + `
    run: [sh, -c, 'test "$(cat "$KUSAW_CANDIDATE_2/pick.txt")" = 2 && test "$KUSAW_CANDIDATES" = "1 2 3"` + readOnly + ` && echo 2 > "$KUSAW_ARTIFACTS/choice"']
  one:
    sandbox: ` + sandbox + `
    resolve: fix
    run: [sh, -c, 'echo one > README']
  two:
    sandbox: ` + sandbox + `
    run: [sh, -c, 'echo two > README']
  fix:
    sandbox: ` + sandbox + `
    run: [sh, -c, 'grep -q "<<<<<<<" README && test "$KUSAW_MERGE_CONFLICTS" = README && cat pick.txt > README']
`
}

// Candidates, their judge and a resolve step run on real worker processes
// (as uid 65534 when the test is root, unable to read serve's folder):
// the judge reads the candidates it exported itself, read-only in its
// sandbox, and the resolve step's commit completes the group's merge.
func TestClusterShapesOnWorkers(t *testing.T) {
	need(t, "git")
	sandbox := clusterSandbox(t)
	r := startClusterServe(t, clusterShapesYAML(sandbox))
	r.startWorker(t, "w1")
	r.startWorker(t, "w2")
	r.waitWorkers(t, 2)
	id := r.submit(t, 1)[0]
	d := waitDetail(t, r.sp.client, id, 3*time.Minute)
	files, _ := filepath.Glob(filepath.Join(r.dir, ".kusaw", "runs", id, record.StepsDir, "*", "*", record.AttemptFile))
	if d.Run.State != status.RunSucceeded {
		for _, f := range files {
			b, _ := os.ReadFile(f)
			t.Logf("%s:\n%s", f, b)
		}
		t.Fatalf("run %s: %s (%s)", id, d.Run.State, d.Run.Message)
	}
	if len(files) != 7 {
		t.Errorf("%d attempts, want 3 candidates, a judge, two members and a resolve", len(files))
	}
	for _, f := range files {
		var a record.AttemptRecord
		b, _ := os.ReadFile(f)
		if json.Unmarshal(b, &a) != nil || a.Worker == "" || a.Outcome != status.OutcomePassed || sandbox == "required" && a.Mode != "required" {
			t.Errorf("attempt %s/%d: worker %q outcome %s mode %s", a.Step, a.Number, a.Worker, a.Outcome, a.Mode)
		}
	}
	br := d.Run.Repos[0]
	app := filepath.Join(r.dir, "app")
	// The judge chose candidate 2; the resolve merged both members on it.
	if got := git(t, app, "show", br.Branch+":README"); got != "2" {
		t.Errorf("README on the run branch %q, want the resolve's (from candidate 2's pick.txt)", got)
	}
	if parents := strings.Fields(git(t, app, "rev-list", "--parents", "-n1", br.Branch)); len(parents) != 3 {
		t.Errorf("the run branch does not end at the resolved merge: %v", parents)
	}
	// The judge and the resolve are the run's helpers, in the order they
	// ran, each with its role and the worker that ran it: in the API's
	// detail and in kusaw show.
	if len(d.Helpers) != 2 {
		t.Fatalf("the run's helpers: %d, want the judge and the resolve", len(d.Helpers))
	}
	judge, res := d.Helpers[0], d.Helpers[1]
	if judge.Step != "pick" || judge.Role == nil || judge.Role.Label != "judge of step tryj's candidates" || judge.Worker == "" ||
		res.Step != "fix" || res.Role == nil || res.Role.Kind != record.RoleResolve || res.Role.Group != 1 || res.Worker == "" {
		t.Errorf("helpers: %s %+v on %q, %s %+v on %q", judge.Step, judge.Role, judge.Worker, res.Step, res.Role, res.Worker)
	}
	show := runKusaw(t, r.dir, "show", id)
	for _, want := range []string{"↳ judge of step tryj's candidates: step pick attempt 1/1: passed", "on worker " + judge.Worker, "↳ " + res.Role.Label + ": step fix attempt 1/1: passed"} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("kusaw show lacks %q:\n%s", want, show.stdout)
		}
	}
	verifyRecords(t, os.Geteuid(), r.dir)
}
