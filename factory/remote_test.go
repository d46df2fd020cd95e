package factory

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// shapeRemote stands for a cluster that takes every pool and "runs" an
// attempt by writing a commit into serve's repo itself: README set to the
// step's name (to both for a resolve, with the spec's merge as second
// parent); a judge writes choice 3. It keeps every spec it was given.
type shapeRemote struct {
	t     *testing.T
	mu    sync.Mutex
	specs map[string]*record.AttemptSpec
	lose  map[string]int // step → how many of its attempts are lost first
	fail  map[string]int // step → how many of its attempts fail first (exit 1)
	// hang: the step whose attempt never ends (serve is killed while a
	// worker runs it); claimed is told its id.
	hang     string
	claimed  chan string
	released []string
}

func (f *shapeRemote) Takes(string) bool { return true }
func (f *shapeRemote) Release(id string) {
	f.mu.Lock()
	f.released = append(f.released, id)
	f.mu.Unlock()
}
func (f *shapeRemote) Reattach(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, _ string, _ uint64) record.RemoteResult {
	return f.Run(ctx, spec, job)
}

func (f *shapeRemote) Run(_ context.Context, spec *record.AttemptSpec, job record.RemoteJob) record.RemoteResult {
	f.mu.Lock()
	f.specs[spec.ID] = spec
	lost, failed := f.lose[spec.Step] > 0, f.lose[spec.Step] == 0 && f.fail[spec.Step] > 0
	if lost {
		f.lose[spec.Step]--
	} else if failed {
		f.fail[spec.Step]--
	}
	f.mu.Unlock()
	job.Claimed("w1", 7)
	if spec.Step == f.hang {
		f.claimed <- spec.ID
		select {}
	}
	if lost {
		return record.RemoteResult{Lost: true, Worker: "w1", Token: 7, Message: "worker w1 stopped answering"}
	}
	if failed {
		one := 1
		return record.RemoteResult{Worker: "w1", Token: 7, Heads: map[string]string{"app": spec.Repos[0].Base},
			Record: &record.AttemptRecord{Outcome: status.OutcomeFailed, Reason: status.ReasonStepExitNonzero, ExitCode: &one, Worktrees: []record.WorktreeRecord{{Repo: "app"}}}}
	}
	repo, base := job.Repos["app"], spec.Repos[0].Base
	head := base
	switch spec.Step {
	case "pick":
		_ = os.WriteFile(filepath.Join(job.Dir, record.ArtifactsDir, "choice"), []byte("3\n"), 0o644)
	case "fix":
		head = commitReadme(f.t, repo, "both", base, spec.Merge["app"])
	default:
		head = commitReadme(f.t, repo, spec.Step+spec.Env[record.EnvCandidate], base)
	}
	return record.RemoteResult{Worker: "w1", Token: 7, Heads: map[string]string{"app": head},
		Record: &record.AttemptRecord{Outcome: status.OutcomePassed, Worktrees: []record.WorktreeRecord{{Repo: "app", Changed: head != base}}}}
}

// commitReadme writes a commit whose only file is README, with parents.
func commitReadme(t *testing.T, repo, content string, parents ...string) string {
	blob := strings.TrimSpace(gitIn(t, repo, content+"\n", "hash-object", "-w", "--stdin"))
	tree := strings.TrimSpace(gitIn(t, repo, "100644 blob "+blob+"\tREADME\n", "mktree"))
	args := []string{"commit-tree", tree, "-m", content}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	return strings.TrimSpace(gitIn(t, repo, "", args...))
}

func gitIn(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

const shapesYAML = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [tryj, [one, two], flaky]
steps:
  tryj: {candidates: 3, select: "judge:pick", run: ["true"]}
  pick: {run: ["true"]}
  one: {run: ["true"], resolve: fix}
  two: {run: ["true"]}
  fix: {run: ["true"]}
  flaky: {run: ["true"], attempts: 2, on_failure: mend}
  mend: {run: ["true"]}
`

// Every shape's attempt goes to the cluster when it takes the step's pool
// (remotable): candidates with their number and siblings, a judge with the
// candidates' commits, a resolve with the commit to merge and the
// conflicted files. None of them names a path of serve.
func TestShapesRemotable(t *testing.T) {
	f := testkit.Factory(t, shapesYAML, "app")
	fr := &shapeRemote{t: t, specs: map[string]*record.AttemptSpec{}, fail: map[string]int{"flaky": 1}}
	e, err := New(f, Options{Kusaw: "/bin/false", Remote: fr})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := e.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", r.Record.State, r.Record.Message)
	}
	if len(fr.specs) != 10 {
		t.Fatalf("%d attempts dispatched, want 3 candidates, a judge, two members, a resolve, two attempts and a fixer", len(fr.specs))
	}
	for id, sp := range fr.specs {
		var a record.AttemptRecord
		if err := readJSON(filepath.Join(record.AttemptDir(r.Dir, sp.Step, sp.Number), record.AttemptFile), &a); err != nil || a.Worker != "w1" {
			t.Errorf("attempt %s: attempt.json names worker %q (%v)", id, a.Worker, err)
		}
		b, _ := sp.Marshal()
		if strings.Contains(string(b), f.Dir) {
			t.Errorf("attempt %s's spec names a path of serve: %s", id, b)
		}
	}
	if sp := fr.specs[record.AttemptID(r.ID(), "tryj", 2)]; sp.Env[record.EnvCandidate] != "2" || !slices.Contains(sp.Siblings, "kusaw/attempts/"+r.ID()+"/tryj/1") ||
		!slices.Contains(sp.Siblings, "kusaw/attempts/"+r.ID()+"/tryj/3") || slices.Contains(sp.Siblings, "kusaw/attempts/"+r.ID()+"/tryj/2") {
		t.Errorf("candidate 2: env %v siblings %v", sp.Env, sp.Siblings)
	}
	if sp := fr.specs[record.AttemptID(r.ID(), "pick", 1)]; len(sp.Candidates) != 3 || sp.Candidates[2].Heads["app"] == "" {
		t.Errorf("judge: candidates %+v", sp.Candidates)
	}
	sp := fr.specs[record.AttemptID(r.ID(), "fix", 1)]
	if sp == nil || sp.Merge["app"] == "" || sp.Env[record.EnvMergeConflicts] != "README" {
		t.Fatalf("resolve: %+v", sp)
	}
	if sp := fr.specs[record.AttemptID(r.ID(), "mend", 1)]; sp == nil || sp.Handoff == nil || sp.Handoff.Env["KUSAW_PREVIOUS_EXIT_CODE"] != "1" {
		t.Errorf("fixer: %+v", sp)
	}
	if got := runFile(t, filepath.Join(f.Dir, "app"), r.ID(), "README"); got != "flaky" {
		t.Errorf("README on the run branch %q", got)
	}
}

// A shape's attempt whose worker is lost runs again under a new number,
// as a step's attempt does (the infrastructure's failure, not the step's):
// a candidate (the others leave its new branch alone), the judge and the
// resolve step. The run ends as if nothing was lost.
func TestShapesLostRunAgain(t *testing.T) {
	f := testkit.Factory(t, shapesYAML, "app")
	fr := &shapeRemote{t: t, specs: map[string]*record.AttemptSpec{}, lose: map[string]int{"tryj": 1, "pick": 1, "fix": 1, "mend": 1},
		fail: map[string]int{"flaky": 1}}
	e, err := New(f, Options{Kusaw: "/bin/false", Remote: fr})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := e.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", r.Record.State, r.Record.Message)
	}
	if len(fr.specs) != 14 {
		t.Fatalf("%d attempts dispatched, want 10 and 4 again", len(fr.specs))
	}
	lost := map[string]int{}
	for id, sp := range fr.specs {
		var a record.AttemptRecord
		if err := readJSON(filepath.Join(record.AttemptDir(r.Dir, sp.Step, sp.Number), record.AttemptFile), &a); err != nil {
			t.Fatal(err)
		}
		if a.Outcome == status.OutcomeLost {
			lost[sp.Step]++
		} else if a.Outcome != status.OutcomePassed && id != record.AttemptID(r.ID(), "flaky", 1) {
			t.Errorf("attempt %s: %s", id, a.Outcome)
		}
	}
	if lost["tryj"] != 1 || lost["pick"] != 1 || lost["fix"] != 1 || lost["mend"] != 1 {
		t.Fatalf("lost attempts by step %v", lost)
	}
	// Candidate 4 (the lost one's again) and candidate 1 leave each other's
	// branches alone.
	again := fr.specs[record.AttemptID(r.ID(), "tryj", 4)]
	first := fr.specs[record.AttemptID(r.ID(), "tryj", 1)]
	if again == nil || !slices.Contains(first.Siblings, "kusaw/attempts/"+r.ID()+"/tryj/4") || !slices.Contains(again.Siblings, "kusaw/attempts/"+r.ID()+"/tryj/2") {
		t.Errorf("siblings: first %v, again %v", first.Siblings, again)
	}
	sr := r.Record.Steps[0]
	if sr.Chosen == 0 || sr.Candidates != 3 {
		t.Errorf("candidates step: %+v", sr)
	}
	if got := runFile(t, filepath.Join(f.Dir, "app"), r.ID(), "README"); got != "flaky" {
		t.Errorf("README on the run branch %q", got)
	}
}

// Serve killed while a worker runs a judge (a helper attempt: no line of
// its own in run.json). Recovery keeps it open for its worker; the resumed
// run starts the candidates again, closes the judge's old attempt and
// tells its worker to stop, and numbers the new judge after it: the old
// attempt's folder and branch are left as they were.
func TestResumeDuringJudge(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [tryj]
steps:
  tryj: {candidates: 3, select: "judge:pick", run: ["true"]}
  pick: {run: ["true"]}
`, "app")
	fr := &shapeRemote{t: t, specs: map[string]*record.AttemptSpec{}, hang: "pick", claimed: make(chan string, 1)}
	e, err := New(f, Options{Kusaw: "/bin/false", Remote: fr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	go e.Execute(context.Background(), r)
	var judge string
	select {
	case judge = <-fr.claimed:
	case <-time.After(30 * time.Second):
		t.Fatal("the judge was never dispatched")
	}
	r.lock.Unlock() // serve's death, as recovery sees it
	id := r.ID()
	pick1 := record.AttemptDir(e.State.RunDir(id), "pick", 1)

	fr2 := &shapeRemote{t: t, specs: map[string]*record.AttemptSpec{}}
	e2, err := New(f, Options{Kusaw: "/bin/false", Remote: fr2})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	r2, err := e2.Resume(id)
	if err != nil {
		t.Fatal(err)
	}
	e2.Execute(context.Background(), r2)
	if r2.Record.State != status.RunSucceeded {
		t.Fatalf("resumed run %s: %s", r2.Record.State, r2.Record.Message)
	}
	var old, again record.AttemptRecord
	if err := readJSON(filepath.Join(pick1, record.AttemptFile), &old); err != nil || old.Outcome != status.OutcomeInterrupted || old.Finished == nil {
		t.Errorf("the judge's old attempt: %+v %v", old, err)
	}
	if !slices.Contains(fr2.released, judge) {
		t.Errorf("released %v, want the old judge %s", fr2.released, judge)
	}
	if _, err := chainlog.VerifyFile(filepath.Join(pick1, record.EventsFile), e2.PublicKey(), chainlog.Binding{Run: id, Step: "pick", Attempt: 1, Kind: chainlog.KindEvents}); err != nil {
		t.Errorf("the old judge's events: %v", err)
	}
	if err := readJSON(filepath.Join(record.AttemptDir(r2.Dir, "pick", 2), record.AttemptFile), &again); err != nil || again.Outcome != status.OutcomePassed {
		t.Errorf("the new judge is not attempt 2: %+v %v", again, err)
	}
}
