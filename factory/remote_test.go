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

// shapeRemote stands for a cluster that takes every pool and "runs" an
// attempt by writing a commit into serve's repo itself: README set to the
// step's name (to both for a resolve, with the spec's merge as second
// parent); a judge writes choice 3. It keeps every spec it was given.
type shapeRemote struct {
	t     *testing.T
	mu    sync.Mutex
	specs map[string]*record.AttemptSpec
}

func (f *shapeRemote) Takes(string) bool { return true }
func (f *shapeRemote) Release(string)    {}
func (f *shapeRemote) Reattach(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, _ string, _ uint64) record.RemoteResult {
	return f.Run(ctx, spec, job)
}

func (f *shapeRemote) Run(_ context.Context, spec *record.AttemptSpec, job record.RemoteJob) record.RemoteResult {
	f.mu.Lock()
	f.specs[spec.ID] = spec
	f.mu.Unlock()
	job.Claimed("w1", 7)
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

// Every shape's attempt goes to the cluster when it takes the step's pool
// (remotable): candidates with their number and siblings, a judge with the
// candidates' commits, a resolve with the commit to merge and the
// conflicted files. None of them names a path of serve.
func TestShapesRemotable(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [tryj, [one, two]]
steps:
  tryj: {candidates: 3, select: "judge:pick", run: ["true"]}
  pick: {run: ["true"]}
  one: {run: ["true"], resolve: fix}
  two: {run: ["true"]}
  fix: {run: ["true"]}
`, "app")
	fr := &shapeRemote{t: t, specs: map[string]*record.AttemptSpec{}}
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
	if len(fr.specs) != 7 {
		t.Fatalf("%d attempts dispatched, want 3 candidates, a judge, two members and a resolve", len(fr.specs))
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
	if sp := fr.specs[record.AttemptID(r.ID(), "tryj", 2)]; sp.Env[record.EnvCandidate] != "2" || len(sp.Siblings) != 2 {
		t.Errorf("candidate 2: env %v siblings %v", sp.Env, sp.Siblings)
	}
	if sp := fr.specs[record.AttemptID(r.ID(), "pick", 1)]; len(sp.Candidates) != 3 || sp.Candidates[2].Heads["app"] == "" {
		t.Errorf("judge: candidates %+v", sp.Candidates)
	}
	sp := fr.specs[record.AttemptID(r.ID(), "fix", 1)]
	if sp == nil || sp.Merge["app"] == "" || sp.Env[record.EnvMergeConflicts] != "README" {
		t.Fatalf("resolve: %+v", sp)
	}
	if got := runFile(t, filepath.Join(f.Dir, "app"), r.ID(), "README"); got != "both" {
		t.Errorf("README on the run branch %q", got)
	}
}
