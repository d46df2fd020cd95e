package factory

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

const foreignYAML = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [s]
steps:
  s: {run: [sh, -c, 'echo hi > out.txt']}
`

// A worker's run of another machine's attempt writes its records without
// fsync (they go with the attempt): they are whole all the same, the
// events sealed and closed, attempt.json the attempt's final record, and
// no temporary file is left beside them.
func TestForeignAttemptRecordsWhole(t *testing.T) {
	f := testkit.Factory(t, foreignYAML, "app")
	fr := &shapeRemote{t: t, specs: map[string]*record.AttemptSpec{}}
	e, err := New(f, Options{Kusaw: "/bin/false", Remote: fr})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := e.Run(context.Background(), "")
	if err != nil || r.Record.State != status.RunSucceeded {
		t.Fatalf("run: %v %+v", err, r.Record)
	}
	spec := fr.specs[record.AttemptID(r.ID(), "s", 1)]
	if spec == nil {
		t.Fatalf("no spec dispatched: %v", fr.specs)
	}
	wf := testkit.Factory(t, foreignYAML, "app")
	w, err := New(wf, Options{Kusaw: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The worker's own repository, holding serve's commits.
	cache := filepath.Join(wf.Dir, "app")
	testkit.GitRun(t, cache, "fetch", "-q", filepath.Join(f.Dir, "app"), "main")
	// As a worker runs it: the local executor, on a job of its own.
	job, err := attempt.ForeignJob(spec, map[string]string{"app": cache}, w.State.RunDir(spec.Run))
	if err != nil {
		t.Fatal(err)
	}
	host := *w.host()
	host.Repos = map[string]string{"app": cache}
	rec, dir := attempt.Run(context.Background(), &host, spec, job), job.Dir
	if rec.Outcome != status.OutcomePassed || len(rec.Worktrees) != 1 || !rec.Worktrees[0].Changed {
		t.Fatalf("foreign attempt: %s %s %+v", rec.Outcome, rec.Message, rec.Worktrees)
	}
	// Its own run branch, made with the worktree, stays at the attempt's
	// base: serve moves the run's branch when it takes the result, and a
	// worker moving its stand-in would be a git process thrown away.
	runBranch := "kusaw/" + spec.Run + "." + spec.Step + ".1"
	if got := strings.TrimSpace(testkit.GitRun(t, cache, "rev-parse", runBranch)); got != rec.Worktrees[0].BaseSHA || got == rec.Worktrees[0].HeadSHA {
		t.Errorf("%s at %s, want the base %s (the commit is %s)", runBranch, got, rec.Worktrees[0].BaseSHA, rec.Worktrees[0].HeadSHA)
	}
	var saved record.AttemptRecord
	if err := readJSON(filepath.Join(dir, record.AttemptFile), &saved); err != nil || saved.Outcome != rec.Outcome || saved.Finished == nil {
		t.Errorf("attempt.json: %+v (%v)", saved, err)
	}
	res, err := chainlog.VerifyFile(filepath.Join(dir, record.EventsFile), w.PublicKey(), chainlog.Binding{Run: spec.Run, Step: spec.Step, Attempt: spec.Number, Kind: chainlog.KindEvents})
	if err != nil || !res.Final {
		t.Errorf("events: %+v %v", res, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if strings.Contains(en.Name(), ".tmp-") {
			t.Errorf("left behind: %s", en.Name())
		}
	}
}
