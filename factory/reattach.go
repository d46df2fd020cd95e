package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// Re-attaching (docs/cluster.md, "When something dies"): serve killed while
// attempts ran on workers leaves them detached: recovery keeps them open,
// their workers go on. A resumed run waits for each again instead of
// running it anew; any other end closes it as interrupted and tells its
// worker to stop.

// detachedOf lists what a resumed run re-attaches to: per step, the
// number of its last attempt when that one is detached. Any other
// detached attempt of the run (not its step's last, of a step the run
// does not resume at, or a helper's: a judge or resolve runs again with
// its shape) is closed now.
func (e *Engine) detachedOf(rec *record.RunRecord, p *resumePoint) map[string]int {
	atts, _ := e.State.AllAttempts(rec)
	out := map[string]int{}
	resumed := map[string]bool{}
	for i, st := range rec.Steps {
		if i >= p.from {
			resumed[st.ID] = true
		}
	}
	for _, a := range atts {
		if !Detached(a) {
			continue
		}
		if resumed[a.Step] && a.Number == p.attempts[a.Step] {
			out[a.Step] = a.Number
			continue
		}
		e.closeDetached(rec, a, "serve restarted; the run did not continue at this attempt")
	}
	return out
}

// adopt reports whether attempt n of step is the detached one the
// resumed run re-attaches to, and takes it (once).
func (r *Run) adopt(step string, n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resume == nil || r.resume.detached[step] != n || n == 0 {
		return false
	}
	delete(r.resume.detached, step)
	return true
}

// reattach waits again for detached attempt n of step on its worker and
// records how it ends, in the same folder and events file.
func (e *Engine) reattach(ctx context.Context, r *Run, s *config.Step, n, of int) *record.AttemptRecord {
	dir := record.AttemptDir(r.Dir, s.ID, n)
	var rec record.AttemptRecord
	err := readJSON(filepath.Join(dir, record.AttemptFile), &rec)
	var spec *record.AttemptSpec
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(dir, record.SpecFile)); err == nil {
			spec, err = record.ParseSpec(b)
		}
	}
	if err == nil && e.opts.Remote == nil {
		err = errors.New("this serve runs no cluster")
	}
	job := e.job(r, s.ID, n)
	if err != nil {
		a := attempt.Reopen(e.host(), e.partialSpec(r, s, n, of), job, nil)
		a.Update(func(ar *record.AttemptRecord) { ar.Worker, ar.Token = rec.Worker, rec.Token })
		// The infrastructure's failure, not the step's: it runs again.
		a.SetOutcome(status.OutcomeLost, status.ReasonLost, "serve restarted and cannot re-attach to the attempt: "+err.Error())
		return a.Finish()
	}
	a := attempt.Reopen(e.host(), spec, job, &rec)
	a.Emit(record.EvClusterReattached, map[string]any{"worker": rec.Worker, "token": rec.Token})
	x := &remoteExecutor{e: e, r: r, reattach: func(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob) record.RemoteResult {
		return e.opts.Remote.Reattach(ctx, spec, job, rec.Worker, rec.Token)
	}}
	return x.Run(ctx, a)
}

// closeDetached ends a detached attempt nobody re-attaches to: its
// record says interrupted, and its worker is told to stop.
func (e *Engine) closeDetached(rec *record.RunRecord, a *record.AttemptRecord, msg string) {
	_ = e.State.closeAttempt(rec, a, time.Now().UTC(), e.opts.Key, msg)
	if e.opts.Remote != nil {
		e.opts.Remote.Release(record.AttemptID(rec.ID, a.Step, a.Number))
	}
}

// closeUnadopted closes what a resumed run was to re-attach to and never
// reached (it ended before that step).
func (e *Engine) closeUnadopted(r *Run) {
	r.mu.Lock()
	var left map[string]int
	if r.resume != nil {
		left, r.resume.detached = r.resume.detached, nil
	}
	r.mu.Unlock()
	if len(left) == 0 {
		return
	}
	// A helper's attempt (a fixer, a judge, a resolve) may be left too.
	atts, _ := e.State.AllAttempts(r.Record)
	for _, a := range atts {
		if Detached(a) && left[a.Step] == a.Number {
			e.closeDetached(r.Record, a, "the run ended before it re-attached to this attempt")
		}
	}
}

// FinishDetached closes every detached attempt of an interrupted run serve
// does not resume (serve.resume off, or the run cannot continue), and
// tells their workers to stop. It returns how many it closed.
func (e *Engine) FinishDetached(id string) (int, error) {
	dir := e.State.RunDir(id)
	l, ok, err := TryLock(filepath.Join(dir, record.LockFile))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("run %s is owned by another kusaw", id)
	}
	defer l.Unlock()
	rec, err := e.State.LoadRun(id)
	if err != nil {
		return 0, err
	}
	if rec.State != status.RunInterrupted {
		return 0, nil
	}
	atts, _ := e.State.AllAttempts(rec)
	n := 0
	for _, a := range atts {
		if Detached(a) {
			e.closeDetached(rec, a, "serve restarted and did not resume the run")
			n++
		}
	}
	return n, nil
}

// DetachedAttempts lists the attempts a resumed run will re-attach to, by
// id: serve keeps their claims in the cluster.
func (r *Run) DetachedAttempts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	if r.resume != nil {
		for step, n := range r.resume.detached {
			out = append(out, record.AttemptID(r.ID(), step, n))
		}
	}
	return out
}
