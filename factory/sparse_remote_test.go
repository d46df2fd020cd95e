package factory

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// sparseWorker stands for a cluster worker (a whole-tree checkout, and a
// worker is not trusted) whose step edits the cone and, in its own
// commits, files outside it: it changes, deletes and adds outside.
type sparseWorker struct {
	fakeRemote
	t       *testing.T
	outside bool // also write outside the cone
}

func (f *sparseWorker) Run(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob) record.RemoteResult {
	job.Claimed("w1", 7)
	repo, base := job.Repos["app"], spec.Repos[0].Base
	wt := f.t.TempDir()
	g := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", wt, "-c", "user.name=w", "-c", "user.email=w@w"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			f.t.Errorf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	g("init", "-q")
	g("fetch", "-q", repo, base)
	g("checkout", "-q", base)
	os.WriteFile(filepath.Join(wt, "src", "main.go"), []byte("edited\n"), 0o644)
	os.WriteFile(filepath.Join(wt, "src", "new.go"), []byte("new\n"), 0o644)
	g("add", "-A")
	g("commit", "-q", "-m", "cone")
	if f.outside {
		os.WriteFile(filepath.Join(wt, "deploy", "prod.yaml"), []byte("forged\n"), 0o644)
		os.Remove(filepath.Join(wt, "docs", "guide.md"))
		os.MkdirAll(filepath.Join(wt, "planted"), 0o755)
		os.WriteFile(filepath.Join(wt, "planted", "x"), []byte("planted\n"), 0o644)
		g("add", "-A")
		g("commit", "-q", "-m", "own")
	}
	head := g("rev-parse", "HEAD")
	// The worker's commits arrive in serve's repository (as accept's
	// import does), no ref moved.
	cmd := exec.Command("git", "-C", repo, "fetch", "-q", wt, head)
	if out, err := cmd.CombinedOutput(); err != nil {
		f.t.Fatalf("import: %v %s", err, out)
	}
	return record.RemoteResult{Worker: "w1", Token: 7, Heads: map[string]string{"app": head},
		Record: &record.AttemptRecord{Outcome: status.OutcomePassed, Worktrees: []record.WorktreeRecord{{Repo: "app", Changed: true}}}}
}

// repos.NAME.sparse holds for an attempt a cluster worker ran: the worker
// checks out the whole tree, and its step (or the worker itself) commits
// changes outside the cone; serve puts every path outside back as in the
// base before the run branch moves, as a local attempt's commit does.
// Twin: a worker that edits only the cone has its commit taken as it is.
func TestSparseKeptOnWorkerCommits(t *testing.T) {
	for _, outside := range []bool{true, false} {
		f := testkit.Factory(t, `version: 1
repos:
  app: {path: app, sparse: [src]}
pipelines:
  default: [edit]
steps:
  edit: {run: ["true"]}
`, "app")
		repo := filepath.Join(f.Dir, "app")
		for _, p := range []string{"src/main.go", "deploy/prod.yaml", "docs/guide.md"} {
			os.MkdirAll(filepath.Dir(filepath.Join(repo, p)), 0o755)
			os.WriteFile(filepath.Join(repo, p), []byte(p+"\n"), 0o644)
		}
		testkit.GitRun(t, repo, "add", "-A")
		testkit.GitRun(t, repo, "commit", "-qm", "tree")
		base, _ := gitOut(repo, "rev-parse", "HEAD")
		fw := &sparseWorker{t: t, outside: outside}
		e, err := New(f, Options{Kusaw: "/bin/false", Remote: fw})
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.Run(context.Background(), "")
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r.Record.State != status.RunSucceeded {
			t.Fatalf("outside %v: run %s: %s", outside, r.Record.State, r.Record.Message)
		}
		diff, _ := gitOut(repo, "diff", "--name-status", "--no-renames", base, "kusaw/"+r.ID())
		want := "M\tsrc/main.go\nA\tsrc/new.go"
		if diff != want {
			t.Errorf("outside %v: the run branch changed\n%s\nwant\n%s", outside, diff, want)
		}
		if got := runFile(t, repo, r.ID(), "deploy/prod.yaml"); got != "deploy/prod.yaml" {
			t.Errorf("outside %v: deploy/prod.yaml on the run branch: %q", outside, got)
		}
		log, _ := gitOut(repo, "log", "--format=%s", base+"..kusaw/"+r.ID())
		subjects := strings.Split(log, "\n")
		if outside && (len(subjects) != 3 || !strings.HasPrefix(subjects[0], "kusaw: keep what is outside the sparse folders (src)")) {
			t.Errorf("the run branch's commits: %q", subjects)
		}
		if !outside && !slices.Equal(subjects, []string{"cone"}) {
			t.Errorf("twin: the worker's commit was not taken as it is: %q", subjects)
		}
	}
}
