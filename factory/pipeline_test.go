package factory

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// shapeRun runs the default pipeline of a factory with an "app" repo,
// unsandboxed (e2e/ covers the sandboxed runs), and returns the run, its
// events and the repo's folder.
func shapeRun(t *testing.T, yaml string) (*Run, []record.Event, string) {
	t.Helper()
	f := testkit.Factory(t, yaml, "app")
	var mu sync.Mutex
	var events []record.Event
	e, err := New(f, Options{Kusaw: "/bin/false", OnEvent: func(ev record.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return r, append([]record.Event(nil), events...), filepath.Join(f.Dir, "app")
}

func eventsOf(evs []record.Event, typ string) []record.Event {
	var out []record.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func runFile(t *testing.T, repo, runID, file string) string {
	t.Helper()
	out, err := gitOut(repo, "show", "kusaw/"+runID+":"+file)
	if err != nil {
		return ""
	}
	return out
}

func gitOut(dir string, args ...string) (string, error) {
	cmd := testkitCmd(dir, args...)
	b, err := cmd.Output()
	return strings.TrimSpace(string(b)), err
}

func TestGroupMergesInOrder(t *testing.T) {
	r, evs, app := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [first, [left, right], after]
steps:
  first: {run: [sh, -c, "echo first > first.txt"]}
  left: {run: [sh, -c, "echo left > left.txt"]}
  right: {run: [sh, -c, "echo right > right.txt"]}
  after: {run: [sh, -c, "test -f left.txt && test -f right.txt && test -f first.txt"]}
`)
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s %s", r.Record.State, r.Record.Reason, r.Record.Message)
	}
	for _, f := range []string{"first.txt", "left.txt", "right.txt"} {
		if runFile(t, app, r.ID(), f) == "" {
			t.Errorf("%s is not on the run branch", f)
		}
	}
	if len(eventsOf(evs, record.EvGroupMerged)) != 1 || len(eventsOf(evs, record.EvGroupStarted)) != 1 {
		t.Fatalf("group events missing")
	}
	// Written order: left merged first, then right, each a merge commit.
	log, _ := gitOut(app, "log", "--format=%s", "--first-parent", "kusaw/"+r.ID())
	li, ri := strings.Index(log, "merge step left"), strings.Index(log, "merge step right")
	if li < 0 || ri < 0 || ri > li {
		t.Fatalf("merge order on the run branch:\n%s", log)
	}
	if r.Record.Steps[1].Group != 1 || r.Record.Steps[2].Group != 1 || r.Record.Steps[0].Group != 0 {
		t.Fatalf("group numbers in run.json: %+v", r.Record.Steps)
	}
	if len(r.Record.Pending) != 0 {
		t.Fatalf("pending moves left: %+v", r.Record.Pending)
	}
}

func TestGroupConflictAndResolve(t *testing.T) {
	yaml := `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [[one, two]]
steps:
  one: {run: [sh, -c, "echo one > README"]RESOLVE}
  two: {run: [sh, -c, "echo two > README"]}
  fix: {run: [sh, -c, "grep -q '<<<<<<<' README && test \"$KUSAW_MERGE_CONFLICTS\" = README && echo both > README"]}
`
	r, evs, app := shapeRun(t, strings.Replace(yaml, "RESOLVE", "", 1))
	if r.Record.State != status.RunFailed || r.Record.Reason != status.ReasonMergeConflict || !strings.Contains(r.Record.Message, "README") {
		t.Fatalf("run %s %s: %s", r.Record.State, r.Record.Reason, r.Record.Message)
	}
	mc := eventsOf(evs, record.EvMergeConflict)
	if len(mc) != 1 || !strings.Contains(strings.Join(anyStrings(mc[0].Data["files"]), ","), "README") {
		t.Fatalf("merge_conflict event: %+v", mc)
	}
	for _, b := range anyStrings(mc[0].Data["branches"]) {
		if _, err := gitOut(app, "rev-parse", "--verify", b); err != nil {
			t.Errorf("member branch %s is gone", b)
		}
	}
	if got := runFile(t, app, r.ID(), "README"); got != "app" {
		t.Errorf("the run branch moved on a conflict: README %q", got)
	}

	r, evs, app = shapeRun(t, strings.Replace(yaml, "RESOLVE", ", resolve: fix", 1))
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("with resolve: %s %s %s", r.Record.State, r.Record.Reason, r.Record.Message)
	}
	if got := runFile(t, app, r.ID(), "README"); got != "both" {
		t.Fatalf("README after resolve: %q", got)
	}
	if len(eventsOf(evs, record.EvMergeResolved)) != 1 {
		t.Fatal("no merge_resolved event")
	}
	parents, _ := gitOut(app, "rev-list", "--parents", "-n1", "kusaw/"+r.ID())
	if len(strings.Fields(parents)) != 3 {
		t.Fatalf("the resolved merge is not a merge commit: %s", parents)
	}
}

func anyStrings(v any) []string {
	var out []string
	switch x := v.(type) {
	case []string:
		return x
	case []any:
		for _, s := range x {
			if str, ok := s.(string); ok {
				out = append(out, str)
			}
		}
	}
	return out
}

func TestGroupFailureStopsSiblings(t *testing.T) {
	r, evs, _ := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [[slow, broken]]
steps:
  slow: {run: [sleep, "30"]}
  broken: {run: [sh, -c, "exit 5"]}
`)
	if r.Record.State != status.RunFailed || !strings.Contains(r.Record.Message, "step broken failed") {
		t.Fatalf("run: %s %s", r.Record.State, r.Record.Message)
	}
	if r.Record.Steps[0].Outcome != status.OutcomeCanceled {
		t.Fatalf("the slow sibling was not stopped: %+v", r.Record.Steps[0])
	}
	if len(eventsOf(evs, record.EvGroupCanceling)) != 1 {
		t.Fatal("no group.canceling event")
	}

	r, _, app := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [[ok, broken]]
steps:
  ok: {run: [sh, -c, "sleep 0.3; echo ok > ok.txt"]}
  broken: {run: [sh, -c, "exit 5"], continue_on_failure: true}
`)
	if r.Record.State != status.RunSucceeded || r.Record.Steps[1].Outcome != status.OutcomeFailed {
		t.Fatalf("continue_on_failure: %s %s %+v", r.Record.State, r.Record.Message, r.Record.Steps)
	}
	if runFile(t, app, r.ID(), "ok.txt") == "" {
		t.Fatal("the passing member's work was not merged")
	}
}

func TestCandidates(t *testing.T) {
	r, evs, app := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [try]
steps:
  try:
    candidates: 3
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt; test $KUSAW_CANDIDATE = 2"]
`)
	if r.Record.State != status.RunSucceeded {
		atts, _ := r.e.State.Attempts(r.Record)
		for _, a := range atts {
			t.Logf("attempt %d: %s %s %s", a.Number, a.Outcome, a.Reason, a.Message)
		}
		t.Fatalf("run: %s %s", r.Record.State, r.Record.Message)
	}
	if got := runFile(t, app, r.ID(), "pick.txt"); got != "2" {
		t.Fatalf("kept candidate wrote %q, want 2", got)
	}
	sr := r.Record.Steps[0]
	if sr.Candidates != 3 || sr.Chosen != sr.FirstAttempt+1 || sr.Attempts != 3 {
		t.Fatalf("step result: %+v", sr)
	}
	if len(eventsOf(evs, record.EvCandidatesSelected)) != 1 {
		t.Fatal("no candidates.selected event")
	}

	r, _, app = shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [try]
steps:
  try:
    candidates: 3
    select: judge:pick
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt"]
  pick:
    run: [sh, -c, "test \"$(cat $KUSAW_CANDIDATE_3/pick.txt)\" = 3 && test \"$KUSAW_CANDIDATES\" = '1 2 3' && echo 3 > $KUSAW_ARTIFACTS/choice"]
`)
	if r.Record.State != status.RunSucceeded {
		b, _ := os.ReadFile(filepath.Join(r.Dir, "steps", "pick", "1", "stderr.log"))
		atts, _ := r.e.State.Attempts(r.Record)
		for _, a := range atts {
			t.Logf("attempt %s %d: %s %s %s", a.Step, a.Number, a.Outcome, a.Reason, a.Message)
		}
		t.Fatalf("judge run: %s %s\n%s", r.Record.State, r.Record.Message, b)
	}
	if got := runFile(t, app, r.ID(), "pick.txt"); got != "3" {
		t.Fatalf("judge's choice wrote %q, want 3", got)
	}
}

func TestFixLoopAndRetryRules(t *testing.T) {
	r, evs, app := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [check]
steps:
  check:
    attempts: 2
    on_failure: fixer
    run: [sh, -c, "test -f fixed.txt || { echo missing fixed.txt; exit 1; }"]
  fixer:
    run: [sh, -c, "test \"$KUSAW_PREVIOUS_EXIT_CODE\" = 1 && grep -q missing $KUSAW_PREVIOUS_DIR/stdout.log.tail && echo yes > fixed.txt"]
`)
	if r.Record.State != status.RunSucceeded || r.Record.Steps[0].Attempts != 2 {
		t.Fatalf("fix loop: %s %s %+v", r.Record.State, r.Record.Message, r.Record.Steps)
	}
	if runFile(t, app, r.ID(), "fixed.txt") != "yes" {
		t.Fatal("the fixer's commit is not on the run branch")
	}
	if len(eventsOf(evs, record.EvFixFinished)) != 1 {
		t.Fatal("no fix.finished event")
	}

	counter := filepath.Join(t.TempDir(), "n")
	os.WriteFile(counter, []byte("0"), 0o644)
	r, evs, _ = shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [flaky]
steps:
  flaky:
    retry: {attempts: 5, on: ["exit:3"]}
    run: [sh, -c, "n=$(($(cat `+counter+`)+1)); echo $n > `+counter+`; test $n -ge 3 && exit 4; exit 3"]
`)
	if r.Record.State != status.RunFailed || r.Record.Steps[0].Attempts != 3 {
		t.Fatalf("exit 3 twice then 4: want 3 attempts and a failed run, got %s %+v", r.Record.State, r.Record.Steps)
	}
	retries := eventsOf(evs, record.EvStepRetry)
	if len(retries) != 3 || retries[2].Data["again"] != false || !strings.Contains(retries[2].Data["why"].(string), "not in retry.on") {
		t.Fatalf("step.retry events: %+v", retries)
	}
}

func testkitCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	return cmd
}

// TestPendingMovesFinishOnResume: a run interrupted between recording a
// group's merge and (not) making it finishes the move on resume, and
// never merges again.
func TestPendingMovesFinishOnResume(t *testing.T) {
	for _, moved := range []bool{true, false} {
		r, _, app := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [[left, right], after]
steps:
  left: {run: [sh, -c, "echo left > left.txt"]}
  right: {run: [sh, -c, "echo right > right.txt"]}
  after: {run: [sh, -c, "test -f left.txt && test -f right.txt"]}
`)
		if r.Record.State != status.RunSucceeded {
			t.Fatalf("run: %s", r.Record.Message)
		}
		e := r.e
		rec, _ := e.State.LoadRun(r.ID())
		rr := rec.Repos[0]
		merged := rr.HeadSHA
		if !moved {
			// The crash came before the branch moved.
			if out, err := gitOut(app, "update-ref", "refs/heads/"+rr.Branch, rr.BaseSHA); err != nil {
				t.Fatal(out, err)
			}
		}
		rec.State, rec.Finished = status.RunInterrupted, nil
		rec.Steps[2].Outcome, rec.Steps[2].Finished = "", nil
		rec.Repos[0].HeadSHA = rr.BaseSHA
		rec.Pending = []record.HeadMove{{Repo: "app", Branch: rr.Branch, From: rr.BaseSHA, To: merged}}
		if err := writeJSON(filepath.Join(r.Dir, record.RunFile), rec); err != nil {
			t.Fatal(err)
		}
		r2, err := e.Resume(r.ID())
		if err != nil {
			t.Fatal(err)
		}
		e.Execute(context.Background(), r2)
		if r2.Record.State != status.RunSucceeded || len(r2.Record.Pending) != 0 {
			t.Fatalf("moved=%v: resumed run %s %s, pending %v", moved, r2.Record.State, r2.Record.Message, r2.Record.Pending)
		}
		head, _ := gitOut(app, "rev-parse", rr.Branch)
		if head != merged {
			t.Fatalf("moved=%v: the run branch is at %s, want the recorded merge %s", moved, head, merged)
		}
		log, _ := gitOut(app, "log", "--format=%s", rr.Branch)
		if strings.Count(log, "merge step left ") != 1 || strings.Count(log, "merge step right ") != 1 {
			t.Fatalf("moved=%v: merges on the run branch:\n%s", moved, log)
		}
	}
}

// TestCandidatesSelectAll: every candidate passes; the one with the
// smallest diff is kept, whichever finished first.
func TestCandidatesSelectAll(t *testing.T) {
	r, evs, app := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [try]
steps:
  try:
    candidates: 3
    select: all
    run: [sh, -c, 'case $KUSAW_CANDIDATE in 1) seq 1 500 > out.txt;; 2) sleep 0.5; echo small > out.txt;; 3) seq 1 50 > out.txt;; esac']
`)
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run: %s %s", r.Record.State, r.Record.Message)
	}
	if got := runFile(t, app, r.ID(), "out.txt"); got != "small" {
		t.Fatalf("kept %q, want candidate 2's small diff", got)
	}
	sel := eventsOf(evs, record.EvCandidatesSelected)
	if len(sel) != 1 || sel[0].Data["chosen"] != 2 || !strings.Contains(sel[0].Data["why"].(string), "smallest diff") {
		t.Fatalf("candidates.selected: %+v", sel)
	}
}
