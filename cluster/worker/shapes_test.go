package worker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// The pipeline shapes that used to run on serve whatever the step's pool:
// candidates (beside each other), a judge (reading the candidates' trees)
// and a resolve step (finishing a parallel group's merge).
const shapes = `version: 1
repos:
  app: {path: ./app}
pipelines:
  all: [tryall]
  judged: [tryj]
  group: [[one, two]]
steps:
  tryall:
    candidates: 3
    select: all
    run: [sh, -c, 'case $KUSAW_CANDIDATE in 1) seq 1 500 > out.txt;; 2) sleep 0.5; echo small > out.txt;; 3) seq 1 50 > out.txt;; esac']
  tryj:
    candidates: 3
    select: judge:pick
    run: [sh, -c, 'sleep 0.3; echo $KUSAW_CANDIDATE > pick.txt']
  pick:
    run: [sh, -c, 'test "$(cat $KUSAW_CANDIDATE_3/pick.txt)" = 3 && test "$(cat $KUSAW_CANDIDATE_1/pick.txt)" = 1 && test "$KUSAW_CANDIDATES" = "1 2 3" && echo 3 > $KUSAW_ARTIFACTS/choice']
  one: {run: [sh, -c, "echo one > README"], resolve: fix}
  two: {run: [sh, -c, "echo two > README"]}
  fix: {run: [sh, -c, "grep -q '<<<<<<<' README && test \"$KUSAW_MERGE_CONFLICTS\" = README && echo both > README"]}
`

// outcome is what a run of the shapes ended with, wherever it ran.
type outcome struct {
	state  status.RunState
	file   string // the run branch's file the pipeline writes
	chosen int    // the kept candidate's number (0: none)
	merge  bool   // the run branch ends at a merge commit
}

func shapeOutcome(t *testing.T, run *factory.Run, file string) outcome {
	t.Helper()
	o := outcome{state: run.Record.State}
	repo := run.Record.Repos[0]
	o.file = testkit.GitRun(t, repo.Path, "show", repo.Branch+":"+file)
	if sr := run.Record.Steps[0]; sr.Chosen > 0 {
		o.chosen = sr.Chosen - sr.FirstAttempt + 1
	}
	o.merge = len(strings.Fields(testkit.GitRun(t, repo.Path, "rev-list", "--parents", "-n1", repo.Branch))) == 3
	return o
}

// onOneMachine runs a pipeline of the shapes with no cluster.
func onOneMachine(t *testing.T, pipeline, file string) outcome {
	t.Helper()
	f := testkit.Factory(t, shapes, "app")
	e, err := factory.New(f, factory.Options{Kusaw: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run, err := e.Run(ctx, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	return shapeOutcome(t, run, file)
}

// onWorker runs a pipeline of the shapes with every attempt on worker w1
// and checks that each attempt's record names it (the helpers' too: a
// judge, a resolve step).
func onWorker(t *testing.T, pipeline, file string, attempts int) (outcome, *factory.Run, *rig) {
	t.Helper()
	r := startServe(t, shapes, 5*time.Second)
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	atts := allAttempts(t, run)
	if len(atts) != attempts {
		t.Errorf("%d attempts, want %d", len(atts), attempts)
	}
	for _, a := range atts {
		if a.Worker != "w1" || a.Token == 0 {
			t.Errorf("attempt %s/%d ran on %q (token %d), want the worker", a.Step, a.Number, a.Worker, a.Token)
		}
	}
	if run.Record.State != status.RunSucceeded {
		for _, a := range atts {
			t.Logf("attempt %s/%d on %q: %s %s %s", a.Step, a.Number, a.Worker, a.Outcome, a.Reason, a.Message)
		}
		t.Fatalf("run %s: %s %s", run.Record.State, run.Record.Reason, run.Record.Message)
	}
	return shapeOutcome(t, run, file), run, r
}

// allAttempts reads every attempt.json of a run: its steps' and the
// helpers' its shapes ran (a judge, a resolve step).
func allAttempts(t *testing.T, run *factory.Run) []record.AttemptRecord {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(run.Dir, record.StepsDir, "*", "*", record.AttemptFile))
	var out []record.AttemptRecord
	for _, f := range files {
		var a record.AttemptRecord
		b, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(b, &a)
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, a)
	}
	return out
}

// specOf is an attempt's spec as serve sent it.
func specOf(t *testing.T, run *factory.Run, step string, n int) (*record.AttemptSpec, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, step, n), record.SpecFile))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := record.ParseSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	return sp, string(b)
}

// Candidates run on the worker beside each other (two at a time there):
// each gets its number, the ref guard of one leaves the others' branches
// alone, and select: all keeps the smallest diff as on one machine.
func TestCandidatesOnWorker(t *testing.T) {
	got, run, _ := onWorker(t, "all", "out.txt", 3)
	want := onOneMachine(t, "all", "out.txt")
	if got != want || got.chosen != 2 || got.file != "small" {
		t.Fatalf("on the worker %+v, on one machine %+v (want candidate 2's small diff)", got, want)
	}
	sp, b := specOf(t, run, "tryall", 2)
	if sp.Env[record.EnvCandidate] != "2" || !slices.Contains(sp.Siblings, "kusaw/attempts/"+run.ID()+"/tryall/1") ||
		!slices.Contains(sp.Siblings, "kusaw/attempts/"+run.ID()+"/tryall/3") || strings.Contains(b, run.Dir) {
		t.Fatalf("candidate 2's spec: env %v siblings %v\n%s", sp.Env, sp.Siblings, b)
	}
	// The worker's ref guard repaired nothing: no candidate undid another.
	for n := 1; n <= 3; n++ {
		ev, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, "tryall", n), record.EventsFile))
		if strings.Contains(string(ev), `"type":"`+record.EvRefsRestored+`"`) {
			t.Errorf("candidate %d: the worker restored branches:\n%s", n, ev)
		}
	}
}

// A judge runs on the worker: its spec names the passing candidates'
// commits (no path of serve), the worker exports them into folders of its
// own, and the judge's choice is kept as on one machine.
func TestJudgeOnWorker(t *testing.T) {
	got, run, _ := onWorker(t, "judged", "pick.txt", 4)
	want := onOneMachine(t, "judged", "pick.txt")
	if got != want || got.chosen != 3 || got.file != "3" {
		t.Fatalf("on the worker %+v, on one machine %+v (want the judge's candidate 3)", got, want)
	}
	sp, b := specOf(t, run, "pick", 1)
	if len(sp.Candidates) != 3 || strings.Contains(b, run.Dir) || len(sp.Env) != 0 {
		t.Fatalf("the judge's spec:\n%s", b)
	}
	repo := run.Record.Repos[0]
	for _, c := range sp.Candidates {
		if branch := testkit.GitRun(t, repo.Path, "rev-parse", "kusaw/attempts/"+run.ID()+"/tryj/"+strconv.Itoa(c.Number)); c.Heads["app"] != branch {
			t.Errorf("candidate %d: the spec names %s, its branch is at %s", c.Number, c.Heads["app"], branch)
		}
	}
}

// A parallel group's conflict is resolved on the worker: the resolve
// step's spec names the commit to merge, the worker merges it before the
// step, and the step's commit completes the merge as on one machine.
func TestResolveOnWorker(t *testing.T) {
	got, run, _ := onWorker(t, "group", "README", 3)
	want := onOneMachine(t, "group", "README")
	if got != want || got.file != "both" || !got.merge {
		t.Fatalf("on the worker %+v, on one machine %+v (want both, a merge commit)", got, want)
	}
	sp, b := specOf(t, run, "fix", 1)
	if len(sp.Merge) != 1 || sp.Env[record.EnvMergeConflicts] != "README" || strings.Contains(b, run.Dir) {
		t.Fatalf("the resolve's spec:\n%s", b)
	}
	repo := run.Record.Repos[0]
	parents := strings.Fields(testkit.GitRun(t, repo.Path, "rev-list", "--parents", "-n1", repo.Branch))
	if len(parents) != 3 || parents[2] != sp.Merge["app"] {
		t.Errorf("the run branch's merge %v does not merge %s", parents, sp.Merge["app"])
	}
}

// Attacker's side: a sandboxed step writes setup.sh, which the factory's
// setup runs before the next step. On one machine setup runs that code
// only inside the next step's sandbox (the commit is not the run's
// starting one); on a worker it must too: the spec names the run's
// starting commit, so the worker tells it from the attempt's base. The
// twin: the first step's setup, on the run's own commit, runs on the host
// and the next step finds what setup made.
func TestSetupOnWorkerStaysInSandbox(t *testing.T) {
	pwned := filepath.Join(t.TempDir(), "pwned")
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
setup:
  - [sh, -c, 'if [ -f setup.sh ]; then sh setup.sh; else echo deps > deps.txt; fi']
pipelines:
  default: [write, use]
steps:
  write:
    sandbox: {mode: required, network: open}
    env: {PWNED: `+pwned+`}
    run: [sh, -c, 'test -f deps.txt && printf "touch %s 2>/dev/null; echo deps > deps.txt\n" "$PWNED" > setup.sh']
  use:
    sandbox: {mode: required, network: open}
    run: [sh, -c, 'test "$(cat deps.txt)" = deps']
`, 5*time.Second)
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State != status.RunSucceeded {
		for _, a := range atts {
			b, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, a.Step, a.Number), record.StderrFile))
			t.Logf("attempt %s/%d on %q: %s %s %s\n%s", a.Step, a.Number, a.Worker, a.Outcome, a.Reason, a.Message, b)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	for _, a := range atts {
		if a.Worker != "w1" {
			t.Errorf("attempt %s/%d ran on %q, want the worker", a.Step, a.Number, a.Worker)
		}
	}
	if _, err := os.Lstat(pwned); err == nil {
		t.Fatal("the worker ran setup on code a sandboxed step wrote outside the sandbox")
	}
	for step, where := range map[string]string{"write": "host", "use": "sandbox"} {
		ev, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, step, 1), record.EventsFile))
		if !strings.Contains(string(ev), `"where":"`+where+`"`) {
			t.Errorf("step %s: setup did not run on the %s:\n%s", step, where, ev)
		}
	}
}

// The infrastructure's side: w1 holds all three candidates when its
// connection dies. Each candidate ends lost and runs again, under a new
// number, on w2; the candidates are then chosen from as if nothing was
// lost (select: all keeps candidate 2's small diff).
func TestLostCandidatesRunAgain(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [try]
steps:
  try:
    candidates: 3
    select: all
    run: [sh, -c, 'sleep 2; case $KUSAW_CANDIDATE in 1) seq 1 500 > out.txt;; 2) echo small > out.txt;; 3) seq 1 50 > out.txt;; esac']
`, 2*time.Second)
	w1, stop1 := r.startWorkerWith(t, "w1", Options{MaxParallel: 3}, nil)
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	done := make(chan *factory.Run, 1)
	go func() {
		run, err := r.e.Run(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- run
	}()
	for n := 0; n < 3; {
		if ctx.Err() != nil {
			t.Fatal("w1 never held the three candidates")
		}
		time.Sleep(20 * time.Millisecond)
		w1.mu.Lock()
		n = len(w1.running)
		w1.mu.Unlock()
	}
	w1.nc.Close()
	stop1()
	r.startWorkerWith(t, "w2", Options{MaxParallel: 3}, nil)
	run := <-done
	if run == nil {
		t.FailNow()
	}
	atts := allAttempts(t, run)
	ran := map[string]int{}
	for _, a := range atts {
		ran[a.Worker+" "+string(a.Outcome)]++
	}
	if run.Record.State != status.RunSucceeded || ran["w1 lost"] != 3 || ran["w2 passed"] != 3 || len(atts) != 6 {
		for _, a := range atts {
			t.Logf("attempt %d on %s: %s %s", a.Number, a.Worker, a.Outcome, a.Message)
		}
		t.Fatalf("run %s: %s; attempts %v", run.Record.State, run.Record.Message, ran)
	}
	repo := run.Record.Repos[0]
	if got := testkit.GitRun(t, repo.Path, "show", repo.Branch+":out.txt"); got != "small" {
		t.Errorf("kept %q, want candidate 2's small diff", got)
	}
	if sr := run.Record.Steps[0]; sr.Chosen < 4 {
		t.Errorf("kept attempt %d: a lost one", sr.Chosen)
	}
}

// A judge and a resolve step in a pool of their own run on a worker that
// never saw the commits they read: serve bundles the candidates' commits
// and the commit to merge for it (beside the base), and the worker checks
// and imports each before the step.
func TestShapesAcrossPools(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [tryj, [one, two]]
steps:
  tryj:
    pool: a
    candidates: 3
    select: judge:pick
    run: [sh, -c, 'echo $KUSAW_CANDIDATE > pick.txt']
  pick:
    pool: b
    run: [sh, -c, 'test "$(cat $KUSAW_CANDIDATE_2/pick.txt)" = 2 && test "$KUSAW_CANDIDATES" = "1 2 3" && echo 2 > $KUSAW_ARTIFACTS/choice']
  one: {pool: a, resolve: fix, run: [sh, -c, "echo one > README"]}
  two: {pool: a, run: [sh, -c, "echo two > README"]}
  fix: {pool: b, run: [sh, -c, "grep -q '<<<<<<<' README && cat pick.txt > README"]}
`, 5*time.Second)
	r.startWorkerWith(t, "w1", Options{Pools: []string{"a"}}, nil)
	r.startWorkerWith(t, "w2", Options{Pools: []string{"b"}}, nil)
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	atts := allAttempts(t, run)
	if run.Record.State != status.RunSucceeded || len(atts) != 7 {
		for _, a := range atts {
			t.Logf("attempt %s/%d on %q: %s %s %s", a.Step, a.Number, a.Worker, a.Outcome, a.Reason, a.Message)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	for _, a := range atts {
		want := "w1"
		if a.Step == "pick" || a.Step == "fix" {
			want = "w2"
		}
		if a.Worker != want {
			t.Errorf("attempt %s/%d ran on %q, want %s", a.Step, a.Number, a.Worker, want)
		}
	}
	repo := run.Record.Repos[0]
	if got := testkit.GitRun(t, repo.Path, "show", repo.Branch+":README"); got != "2" {
		t.Errorf("README on the run branch %q, want the resolve's (candidate 2's pick.txt)", got)
	}
	// What w2 was sent beside the base: the three candidates, then the
	// member's commit to merge.
	for step, want := range map[string]int{"pick": 3, "fix": 1} {
		sp, _ := specOf(t, run, step, 1)
		ev, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, step, 1), record.EventsFile))
		n := 0
		for _, need := range sp.Needs()[1:] {
			if strings.Contains(string(ev), `"commit":"`+need.Commit+`"`) {
				n++
			}
		}
		if n != want || len(sp.Needs()) != want+1 {
			t.Errorf("%s: %d of %d commits beyond the base were bundled:\n%s", step, n, len(sp.Needs())-1, ev)
		}
	}
}

// Attacker's side: the holder of a judge's attempt asks serve for full
// bundles. Serve gives it each commit the attempt reads (the base, each
// candidate's) and refuses any other commit of its repositories (here one
// on a branch no attempt was given). The twin is the worker's own
// fallback: every commit its spec needs comes whole.
func TestFullBundleOnlyOfWhatTheAttemptReads(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [tryj]
steps:
  tryj:
    pool: a
    candidates: 2
    select: judge:pick
    run: [sh, -c, 'echo $KUSAW_CANDIDATE > pick.txt']
  pick:
    run: [sh, -c, 'exit 1']
`, 5*time.Second)
	app := r.e.F.Repos["app"].Path
	testkit.GitRun(t, app, "checkout", "-q", "-b", "private")
	os.WriteFile(filepath.Join(app, "secret.txt"), []byte("not for workers\n"), 0o644)
	testkit.GitRun(t, app, "add", "secret.txt")
	testkit.GitRun(t, app, "commit", "-qm", "private")
	private := testkit.GitRun(t, app, "rev-parse", "HEAD")
	testkit.GitRun(t, app, "checkout", "-q", "main")

	r.startWorkerWith(t, "w1", Options{Pools: []string{"a"}}, nil)
	id, nc, h := r.enrolled(t, "mallory")
	m := &scripted{t: t, r: r, name: "mallory", h: h, key: func() []byte { return id.SigningKey() }}
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	done := make(chan *factory.Run, 1)
	go func() {
		run, err := r.e.Run(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- run
	}()
	spec, _, tok := m.take(ctx)
	if spec.Step != "pick" || len(spec.Candidates) != 2 {
		t.Fatalf("took %s with candidates %+v, want the judge", spec.ID, spec.Candidates)
	}
	full := func(commit string) (string, error) {
		b, _ := json.Marshal(cluster.BundleRequest{Attempt: spec.ID, Worker: "mallory", Token: tok, Repo: "app", Commit: commit})
		msg, err := nc.RequestWithContext(ctx, cluster.BundleSubject(cluster.Key(spec.ID), "mallory"), b)
		if err != nil {
			return "", err
		}
		var rep cluster.BundleReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			return "", err
		}
		if rep.Error != "" {
			return "", errors.New(rep.Error)
		}
		p := filepath.Join(t.TempDir(), "full.bundle")
		if _, err := h.GetFile(ctx, rep.Object, p); err != nil {
			return "", err
		}
		repo := t.TempDir()
		testkit.GitRun(t, repo, "init", "-q")
		return cluster.ImportBundle(ctx, repo, p)
	}
	for _, need := range spec.Needs() {
		if tip, err := full(need.Commit); err != nil || tip != need.Commit {
			t.Errorf("full bundle of %s, which the attempt reads: %s %v", need.Commit, tip, err)
		}
	}
	if tip, err := full(""); err != nil || tip != spec.Repos[0].Base {
		t.Errorf("full bundle of the base: %s %v", tip, err)
	}
	if tip, err := full(private); err == nil || tip != "" {
		t.Errorf("serve bundled %s, a commit the attempt does not read (%s)", private, tip)
	}
	b, _ := json.Marshal(cluster.Result{Attempt: spec.ID, Worker: "mallory", Token: tok, Error: "scripted"})
	if _, err := h.JS.Publish(ctx, cluster.ResultSubject(cluster.Key(spec.ID), "mallory"), b); err != nil {
		t.Fatal(err)
	}
	<-done
}

// A worker refuses a spec it cannot honour as asked (here another
// version's) and says so: the attempt fails with its reason, naming the
// fix, instead of waiting for a worker that never comes.
func TestWorkerRefusalReported(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [s]
steps:
  s: {run: ["true"]}
`, 5*time.Second)
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	spec := &record.AttemptSpec{Version: record.SpecVersion + 1, ID: "r1/s/1", Run: "r1", Step: "s", Number: 1, Of: 1, Pool: "default"}
	claimed := ""
	res := r.d.Run(ctx, spec, record.RemoteJob{Dir: t.TempDir(), Repos: map[string]string{}, Emit: func(string, map[string]any) {},
		Claimed: func(w string, _ uint64) { claimed = w }, Secret: func(string) (string, error) { return "", os.ErrNotExist }})
	if ctx.Err() != nil {
		t.Fatal("the attempt waited for a worker until the test's deadline")
	}
	if res.Record != nil || res.Worker != "w1" || claimed != "w1" || !strings.Contains(res.Message, "cannot run the attempt") ||
		!strings.Contains(res.Message, "run the same kusaw version on serve and its workers") {
		t.Fatalf("result %+v (claimed by %q)", res, claimed)
	}
}
