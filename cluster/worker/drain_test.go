package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/dispatch"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

const slowTwoSteps = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [slow, check]
steps:
  slow:
    run: [sh, -c, 'sleep 1.5; echo slow > slow.txt']
  check:
    run: [sh, -c, 'test -s slow.txt && echo checked > check.txt']
`

// runAsync runs the factory's default pipeline in the background.
func (r *rig) runAsync(t *testing.T) <-chan *factory.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	out := make(chan *factory.Run, 1)
	go func() {
		defer cancel()
		run, err := r.e.Run(ctx, "")
		if err != nil {
			t.Error(err)
		}
		out <- run
	}()
	return out
}

// waitRunning waits until worker reports n running attempts.
func (r *rig) waitRunning(t *testing.T, worker string, n int) {
	t.Helper()
	waitUntil(t, worker+" to run an attempt", func() bool {
		for _, ws := range r.d.Workers() {
			if ws.Name == worker && ws.Running == n {
				return true
			}
		}
		return false
	})
}

// startWorkerRun starts a worker like startWorker and also returns what
// its Run returned, once it did.
func (r *rig) startWorkerRun(t *testing.T, name string, o Options) (*Worker, context.CancelFunc, <-chan error) {
	t.Helper()
	dir := t.TempDir()
	tok, err := r.srv.NewToken("", cluster.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(r.ctx, dir, tok.String(), name, "test", nil); err != nil {
		t.Fatal(err)
	}
	o.StateDir, o.Kusaw, o.Version = dir, "/bin/false", "test"
	w, err := New(r.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); w.Close() })
	return w, cancel, done
}

func attemptsOf(t *testing.T, r *rig, run *factory.Run) []*record.AttemptRecord {
	t.Helper()
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State != status.RunSucceeded {
		for _, a := range atts {
			t.Logf("attempt %s/%d: %s %s %s (worker %s)", a.Step, a.Number, a.Outcome, a.Reason, a.Message, a.Worker)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	return atts
}

// A draining worker (SIGTERM) takes no new attempt and lets the one it
// runs finish: the attempt passes on it, the next step goes to another
// worker, and Run returns once nothing runs.
func TestDrainLetsTheAttemptFinish(t *testing.T) {
	r := startServe(t, slowTwoSteps, 30*time.Second)
	w1, _, done := r.startWorkerRun(t, "w1", Options{MaxParallel: 1})
	runc := r.runAsync(t)
	r.waitRunning(t, "w1", 1)
	w1.Drain("SIGTERM", time.Minute)
	waitUntil(t, "serve to see w1 draining", func() bool {
		for _, ws := range r.d.Workers() {
			if ws.Name == "w1" {
				return ws.Draining
			}
		}
		return false
	})
	r.startWorker(t, "w2")
	run := <-runc
	atts := attemptsOf(t, r, run)
	if len(atts) != 2 || atts[0].Worker != "w1" || atts[0].Outcome != status.OutcomePassed || atts[1].Worker != "w2" {
		for _, a := range atts {
			t.Logf("attempt %s/%d: %s on %s", a.Step, a.Number, a.Outcome, a.Worker)
		}
		t.Fatal("want step slow passed on the draining w1, step check on w2")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a drained worker's Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drained worker's Run did not return")
	}
}

// A drain that runs out of time hands the attempt back: it ends lost (not
// a step failure) and runs again on another worker; a stop at once (the
// second signal) does the same without waiting.
func TestDrainTimeoutHandsBack(t *testing.T) {
	for _, force := range []bool{false, true} {
		name := "timeout"
		if force {
			name = "at-once"
		}
		t.Run(name, func(t *testing.T) {
			r := startServe(t, slowTwoSteps, 30*time.Second)
			w1, stop, done := r.startWorkerRun(t, "w1", Options{MaxParallel: 1})
			runc := r.runAsync(t)
			r.waitRunning(t, "w1", 1)
			if force {
				w1.Drain("SIGTERM", time.Hour)
				stop()
			} else {
				w1.Drain("SIGTERM", 100*time.Millisecond)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the worker's Run did not return after handing back")
			}
			r.startWorker(t, "w2")
			run := <-runc
			atts := attemptsOf(t, r, run)
			if len(atts) != 3 || atts[0].Outcome != status.OutcomeLost || atts[0].Reason != status.ReasonLost || atts[0].Worker != "w1" ||
				!strings.Contains(atts[0].Message, "handed back") || atts[1].Worker != "w2" || atts[1].Outcome != status.OutcomePassed {
				for _, a := range atts {
					t.Logf("attempt %s/%d: %s %s %q on %s", a.Step, a.Number, a.Outcome, a.Reason, a.Message, a.Worker)
				}
				t.Fatal("want slow/1 lost (handed back) on w1, slow/2 passed on w2")
			}
		})
	}
}

// serve's kusaw workers drain: the worker finishes what it runs and its
// Run returns; a worker that is not connected cannot be drained.
func TestServeDrainsAWorker(t *testing.T) {
	r := startServe(t, slowTwoSteps, 30*time.Second)
	_, _, done := r.startWorkerRun(t, "w1", Options{MaxParallel: 1})
	runc := r.runAsync(t)
	r.waitRunning(t, "w1", 1)
	if err := r.d.Drain(r.ctx, "w1", 0); err != nil {
		t.Fatal(err)
	}
	r.startWorker(t, "w2")
	atts := attemptsOf(t, r, <-runc)
	if atts[0].Worker != "w1" || atts[0].Outcome != status.OutcomePassed {
		t.Fatalf("the drained worker's attempt: %s on %s", atts[0].Outcome, atts[0].Worker)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drained worker's Run did not return")
	}
	if err := r.d.Drain(r.ctx, "nobody", 0); !errors.Is(err, dispatch.ErrNoWorker) {
		t.Errorf("draining an unknown worker: %v", err)
	}
}

// Attacker's side: a retired worker. Its connection is closed and its key
// no longer lets it in; and where serve cannot close its connection (an
// existing NATS cluster: the account revokes it), its claim of an attempt
// is refused and recorded as fenced, and the attempt it held ends lost.
// The twin: another worker takes the work and the run succeeds.
func TestRetiredWorkerRefused(t *testing.T) {
	r := startServe(t, slowTwoSteps, 30*time.Second)
	_, _, done := r.startWorkerRun(t, "old", Options{MaxParallel: 1})
	runc := r.runAsync(t)
	r.waitRunning(t, "old", 1)
	// Serve cannot close the connection here (no Disconnect): what it
	// sends from now on must be refused all the same.
	held, err := r.d.Retire(r.ctx, "old")
	if err != nil || held != 1 {
		t.Fatalf("retire: %d %v", held, err)
	}
	if _, err := r.d.Retire(r.ctx, "old"); !errors.Is(err, dispatch.ErrNoWorker) {
		t.Errorf("retired twice: %v", err)
	}
	for _, ws := range r.d.Workers() {
		if ws.Name == "old" {
			t.Errorf("kusaw workers still lists the retired worker")
		}
	}
	r.startWorker(t, "new")
	run := <-runc
	atts := attemptsOf(t, r, run)
	if atts[0].Worker != "old" || atts[0].Outcome != status.OutcomeLost || !strings.Contains(atts[0].Message, "retired") {
		t.Errorf("the retired worker's attempt: %s %q on %s", atts[0].Outcome, atts[0].Message, atts[0].Worker)
	}
	for _, a := range atts[1:] {
		if a.Worker != "new" || a.Outcome != status.OutcomePassed {
			t.Errorf("attempt %s/%d: %s on %s, want passed on new", a.Step, a.Number, a.Outcome, a.Worker)
		}
	}
	// Its late result (the attempt ran on) is fenced, never used.
	fenced := filepath.Join(r.srv.Dir, dispatch.FencedFile)
	waitUntil(t, "the retired worker's result fenced", func() bool {
		b, _ := os.ReadFile(fenced)
		return strings.Contains(string(b), `"worker":"old"`)
	})
	// Now the embedded server closes its connection, and its key cannot
	// connect again.
	if n := r.srv.Disconnect(r.srv.Registry.Known("old").NKey); n == 0 {
		t.Errorf("no connection of the retired worker was closed")
	}
	select {
	case err := <-done:
		if !errors.Is(err, cluster.ErrNotEnrolled) {
			t.Errorf("the retired worker's Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the retired worker's Run did not end when its key was refused")
	}
	id := r.srv.Registry.Known("old")
	if id == nil || id.Retired == nil {
		t.Fatalf("the retired worker's keys are gone: %+v", id)
	}
	tok, _ := r.srv.NewToken("", cluster.Grant{})
	if _, err := Join(r.ctx, t.TempDir(), tok.String(), "old", "test", nil); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("a new worker took a retired worker's name: %v", err)
	}
}
