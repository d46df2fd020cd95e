package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// repos.NAME.sparse on a worker, from the step's side in its sandbox:
// the spec carries the folders, the worker's worktree holds the cone
// only (the step finds lib/ absent), and what the step writes or commits
// outside it is not in the worker's commit, so serve has nothing to put
// back; twin: its edit inside the cone is committed.
func TestSparseOnWorker(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app, sparse: [src]}
pipelines:
  default: [edit]
steps:
  edit:
    sandbox: {mode: required, network: open}
    run:
      - sh
      - -c
      - |
        set -eu
        test ! -e lib/util.go
        test -f src/a.go
        echo changed > src/a.go
        mkdir -p lib other && echo forged > lib/util.go && echo planted > other/x
        git update-index --force-remove lib/keep.go
        git -c user.name=s -c user.email=s@s commit -q -m own --no-verify
`, 5*time.Second)
	app := r.e.F.Repos["app"].Path
	for _, f := range []string{"src/a.go", "lib/util.go", "lib/keep.go"} {
		os.MkdirAll(filepath.Join(app, filepath.Dir(f)), 0o755)
		if err := os.WriteFile(filepath.Join(app, f), []byte(f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testkit.GitRun(t, app, "add", "-A")
	testkit.GitRun(t, app, "commit", "-qm", "tree")
	base := strings.TrimSpace(testkit.GitRun(t, app, "rev-parse", "HEAD"))
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State != status.RunSucceeded || len(atts) != 1 || atts[0].Worker != "w1" {
		for _, a := range atts {
			b, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, a.Step, a.Number), record.StderrFile))
			t.Logf("attempt %s/%d on %q: %s %s %s\n%s", a.Step, a.Number, a.Worker, a.Outcome, a.Reason, a.Message, b)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	diff := strings.Fields(testkit.GitRun(t, app, "diff", "--name-status", "--no-renames", base, "kusaw/"+run.ID()))
	if want := []string{"M", "src/a.go"}; !slices.Equal(diff, want) {
		t.Fatalf("the run's commit changed %q, want exactly %q", diff, want)
	}
	// The worker checked out the cone and its own commit kept the rule:
	// serve had nothing to put back (it would, for a worker that did not).
	ev, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, "edit", 1), record.EventsFile))
	if !strings.Contains(string(ev), `"sparse":["src"]`) || strings.Contains(string(ev), "kept_outside_sparse") {
		t.Errorf("the worker's worktree was not sparse, or its commit changed paths outside the cone:\n%s", ev)
	}
}
