package factory

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// fakeRemote stands for serve's cluster: Run claims as worker w1 with
// token 7 and, for the step named hang, never returns (serve "dies"
// there); anything else passes at once, unchanged.
type fakeRemote struct {
	mu         sync.Mutex
	hang       string
	claimed    chan string
	runs       []string
	reattached []string
	released   []string
}

func (f *fakeRemote) Takes(string) bool { return true }

func (f *fakeRemote) pass(spec *record.AttemptSpec, worker string, token uint64) record.RemoteResult {
	heads := map[string]string{}
	for _, r := range spec.Repos {
		heads[r.Name] = r.Base
	}
	return record.RemoteResult{Worker: worker, Token: token, Heads: heads,
		Record: &record.AttemptRecord{Outcome: status.OutcomePassed}}
}

func (f *fakeRemote) Run(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob) record.RemoteResult {
	f.mu.Lock()
	f.runs = append(f.runs, spec.ID)
	f.mu.Unlock()
	job.Claimed("w1", 7)
	if spec.Step == f.hang {
		f.claimed <- spec.ID
		select {} // serve is killed while the worker runs it
	}
	return f.pass(spec, "w1", 7)
}

func (f *fakeRemote) Reattach(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, worker string, token uint64) record.RemoteResult {
	f.mu.Lock()
	f.reattached = append(f.reattached, fmt.Sprintf("%s %s %d", spec.ID, worker, token))
	f.mu.Unlock()
	return f.pass(spec, worker, token)
}

func (f *fakeRemote) Release(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, id)
}

const twoRemoteSteps = `version: 1
repos:
  app: {path: app}
pipelines:
  default: [a, b]
steps:
  a: {run: [sh, -c, "true"]}
  b: {run: [sh, -c, "true"]}
`

// detachedRun starts a run whose step a a worker claimed, then "kills"
// serve there: the run's lock is let go with the attempt unfinished.
// It returns the factory and the run's id.
func detachedRun(t *testing.T) (*config.Factory, string) {
	t.Helper()
	f := testkit.Factory(t, twoRemoteSteps, "app")
	fr := &fakeRemote{hang: "a", claimed: make(chan string, 1)}
	e, err := New(f, Options{Remote: fr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	go e.Execute(context.Background(), r)
	select {
	case <-fr.claimed:
	case <-time.After(30 * time.Second):
		t.Fatal("step a was never dispatched")
	}
	r.lock.Unlock() // serve's death, as recovery sees it
	return f, r.ID()
}

// A serve killed while a worker ran an attempt: recovery leaves the
// attempt open, and the resumed run re-attaches to it (the worker and
// token it was claimed with) instead of running step a again; step b
// then runs as usual and the attempt's events file verifies.
func TestResumeReattaches(t *testing.T) {
	f, id := detachedRun(t)
	fr := &fakeRemote{}
	e, err := New(f, Options{Remote: fr})
	if err != nil {
		t.Fatal(err)
	}
	a1 := filepath.Join(e.State.RunDir(id), record.StepsDir, "a", "1")
	var rec record.AttemptRecord
	if err := readJSON(filepath.Join(a1, record.AttemptFile), &rec); err != nil {
		t.Fatal(err)
	}
	if !Detached(&rec) || rec.Worker != "w1" || rec.Token != 7 {
		t.Fatalf("recovery closed the worker's attempt: %+v", rec)
	}
	r, err := e.Resume(id)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.DetachedAttempts(); len(got) != 1 || got[0] != id+"/a/1" {
		t.Fatalf("detached attempts %v", got)
	}
	e.Execute(context.Background(), r)
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", r.Record.State, r.Record.Message)
	}
	if want := []string{id + "/a/1 w1 7"}; fmt.Sprint(fr.reattached) != fmt.Sprint(want) {
		t.Errorf("re-attached %v, want %v", fr.reattached, want)
	}
	if want := []string{id + "/b/1"}; fmt.Sprint(fr.runs) != fmt.Sprint(want) {
		t.Errorf("dispatched anew %v, want only %v", fr.runs, want)
	}
	if _, err := os.Stat(filepath.Join(e.State.RunDir(id), record.StepsDir, "a", "2")); err == nil {
		t.Error("step a ran a second attempt")
	}
	if err := readJSON(filepath.Join(a1, record.AttemptFile), &rec); err != nil || rec.Outcome != status.OutcomePassed || rec.Finished == nil {
		t.Errorf("attempt a/1 after re-attaching: %+v %v", rec, err)
	}
	res, err := chainlog.VerifyFile(filepath.Join(a1, record.EventsFile), e.PublicKey(), chainlog.Binding{Run: id, Step: "a", Attempt: 1, Kind: chainlog.KindEvents})
	if err != nil {
		t.Fatalf("events of a/1: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(a1, record.EventsFile))
	if strings.Count(string(b), `"type":"`+record.EvAttemptFinished+`"`) != 1 || !strings.Contains(string(b), record.EvClusterReattached) {
		t.Errorf("events of a/1 (%d lines): want one attempt.finished and a %s:\n%s", res.Lines, record.EvClusterReattached, b)
	}
}

// Without a resume (serve.resume off), the detached attempt is closed as
// interrupted and its worker told to stop; a second call finds nothing.
func TestFinishDetached(t *testing.T) {
	f, id := detachedRun(t)
	fr := &fakeRemote{}
	e, err := New(f, Options{Remote: fr})
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.FinishDetached(id)
	if err != nil || n != 1 {
		t.Fatalf("FinishDetached: %d %v", n, err)
	}
	if want := []string{id + "/a/1"}; fmt.Sprint(fr.released) != fmt.Sprint(want) {
		t.Errorf("released %v, want %v", fr.released, want)
	}
	var rec record.AttemptRecord
	if err := readJSON(filepath.Join(e.State.RunDir(id), record.StepsDir, "a", "1", record.AttemptFile), &rec); err != nil || rec.Outcome != status.OutcomeInterrupted || rec.Finished == nil {
		t.Errorf("attempt a/1: %+v %v", rec, err)
	}
	if n, err := e.FinishDetached(id); n != 0 || err != nil {
		t.Errorf("second FinishDetached: %d %v", n, err)
	}
}
