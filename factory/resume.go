package factory

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/worktree"
)

// Hooks serve needs from the engine: resuming an interrupted run, ending a
// run that never left the queue, and interrupting a run on shutdown.

// resumePoint says where a resumed run continues: the first step that did
// not pass, and how many attempts each step already used (their folders
// and branches stay, so new attempts are numbered after them).
type resumePoint struct {
	from     int
	attempts map[string]int
	prevFrom string // the step it resumes at, for the run.started event
	// detached: per step, its last attempt when a worker still runs it
	// (serve died meanwhile): the run re-attaches to it (reattach.go).
	detached map[string]int
}

func (p *resumePoint) skip(i int) bool { return p != nil && i < p.from }

func (p *resumePoint) attemptBase(step string) int {
	if p == nil {
		return 0
	}
	return p.attempts[step]
}

func (r *Run) resumeStarted(data map[string]any) {
	if r.resume != nil {
		data["resumed_from"] = r.resume.prevFrom
	}
}

// ErrNotResumable is returned by Resume for a run that cannot continue.
var ErrNotResumable = errors.New("run cannot be resumed")

// Resume re-queues an interrupted run from its first step that did not
// pass: the run keeps its id, run branches and finished steps. Execute
// runs the returned run. The pipeline must still name the same steps.
func (e *Engine) Resume(id string) (*Run, error) {
	rec, err := e.State.LoadRun(id)
	if err != nil {
		return nil, err
	}
	if rec.State != status.RunInterrupted {
		return nil, fmt.Errorf("%w: run %s is %s, not interrupted", ErrNotResumable, rec.ID, rec.State)
	}
	_, steps, err := e.Pipeline(rec.Pipeline)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotResumable, err)
	}
	if len(steps) != len(rec.Steps) {
		return nil, fmt.Errorf("%w: pipeline %s changed since run %s started; start a new run", ErrNotResumable, rec.Pipeline, rec.ID)
	}
	for i, s := range steps {
		if rec.Steps[i].ID != s.ID {
			return nil, fmt.Errorf("%w: pipeline %s changed since run %s started; start a new run", ErrNotResumable, rec.Pipeline, rec.ID)
		}
	}
	dir := e.State.RunDir(rec.ID)
	l, ok, err := TryLock(filepath.Join(dir, record.LockFile))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: run %s is owned by another kusaw", ErrNotResumable, rec.ID)
	}
	p := &resumePoint{attempts: map[string]int{}}
	// Attempt folders on disk count, not only the record: a crash can come
	// between an attempt's folder and the step's line in run.json. The
	// helpers' (fixers, judges, resolve steps) count too: their next
	// attempts must not take an old one's folder or branch.
	folders, _ := os.ReadDir(filepath.Join(dir, record.StepsDir))
	for _, st := range folders {
		entries, _ := os.ReadDir(filepath.Join(dir, record.StepsDir, st.Name()))
		for _, en := range entries {
			var n int
			if _, err := fmt.Sscan(en.Name(), &n); err == nil && n > p.attempts[st.Name()] {
				p.attempts[st.Name()] = n
			}
		}
	}
	p.from = len(rec.Steps)
	for i, st := range rec.Steps {
		if st.Outcome != status.OutcomePassed {
			p.from = i
			break
		}
	}
	// No run branch yet (the crash came before they were made): start over.
	if len(rec.Repos) == 0 {
		p = nil
	} else if p.from < len(rec.Steps) {
		p.prevFrom = rec.Steps[p.from].ID
	}
	if p != nil {
		p.detached = e.detachedOf(rec, p)
	}
	for i := range rec.Steps {
		if p == nil || i >= p.from {
			rec.Steps[i].Outcome, rec.Steps[i].Reason, rec.Steps[i].Started, rec.Steps[i].Finished = "", "", nil, nil
		}
	}
	host, _ := os.Hostname()
	rec.State, rec.Reason, rec.Message, rec.Fix, rec.Finished = status.RunQueued, "", "", "", nil
	rec.Owner = &record.Owner{PID: os.Getpid(), Host: host, Start: processStart}
	r := &Run{Record: rec, Dir: dir, e: e, steps: steps, lock: l, redact: &attempt.Redactor{}, resume: p, params: loadParams(dir),
		limits: e.pipelineLimits(rec.Pipeline)}
	if err := writeJSON(filepath.Join(dir, record.RunFile), rec); err != nil {
		l.Unlock()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(e.State.Dir, record.ActiveDir, rec.ID), nil, record.FileMode()); err != nil {
		l.Unlock()
		return nil, err
	}
	return r, nil
}

// Resumed reports whether the run continues an interrupted one, and the
// step it continues at.
func (r *Run) Resumed() (bool, string) {
	if r.resume == nil {
		return false, ""
	}
	return true, r.resume.prevFrom
}

// Abandon ends a run that never started executing (it was still queued):
// canceled on request, or interrupted when serve stops. It writes the
// run's record and its run.finished event and releases the run.
func (e *Engine) Abandon(r *Run, st status.RunState, msg string) {
	reason := status.ReasonRunCanceled
	if st == status.RunInterrupted {
		reason = status.ReasonRunInterrupted
	}
	now := time.Now().UTC()
	rec := r.Record
	if rec.Started == nil {
		rec.Started = &now
	}
	r.events = e.openRunSink(r)
	rec.State, rec.Reason, rec.Message, rec.Fix, rec.Finished = st, reason, msg, reason.Info().Fix, &now
	r.save()
	r.events.Emit(record.EvRunFinished, map[string]any{"state": st, "reason": reason, "message": msg, "fix": rec.Fix, "duration_ms": int64(0), "queued": true})
	e.notify(r, "run.finished", "")
	r.finish()
}

// Interrupt marks a run so that canceling its context records it (and its
// running attempt) as interrupted rather than canceled: serve uses it when
// it stops with runs still running. The caller then cancels the context.
func (r *Run) Interrupt() { r.interrupted.Store(true) }

// CheckParams refuses parameter names that are not environment names and
// oversized values.
func CheckParams(p map[string]string) error {
	if len(p) > 64 {
		return fmt.Errorf("%w: %d parameters (at most 64)", record.ErrBadParams, len(p))
	}
	for k, v := range p {
		if k == "" || len(k) > 64 {
			return fmt.Errorf("%w: name %q must be 1 to 64 characters", record.ErrBadParams, k)
		}
		for i, c := range k {
			if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
				return fmt.Errorf("%w: name %q may hold only letters, digits and _ (not first)", record.ErrBadParams, k)
			}
		}
		if len(v) > 8192 || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: value of %s is longer than 8 KiB or holds a NUL byte", record.ErrBadParams, k)
		}
	}
	return nil
}

func loadParams(dir string) map[string]string {
	var p map[string]string
	if b, err := os.ReadFile(filepath.Join(dir, record.ParamsFile)); err == nil {
		_ = json.Unmarshal(b, &p)
	}
	return p
}

// openRunSink opens a run's events file: a new chained log, or, for a run
// that already has one (resumed, or ended from the queue after a restart),
// the same log continued, its events numbered after the last.
func (e *Engine) openRunSink(r *Run) *attempt.Sink {
	return e.continueSink(filepath.Join(r.Dir, record.EventsFile), r.ID(), "", 0, r.redact)
}

// removeLeaseDirs removes what a dead proxy's lease left for an attempt:
// the lease folder beside it, and the temp folder its note names (only a
// kusaw-lease-* folder directly in a temp directory).
func removeLeaseDirs(attemptDir string) {
	os.RemoveAll(filepath.Join(attemptDir, "lease"))
	note := filepath.Join(attemptDir, record.LeaseNoteFile)
	if b, err := os.ReadFile(note); err == nil {
		p := filepath.Clean(strings.TrimSpace(string(b)))
		if filepath.IsAbs(p) && strings.HasPrefix(filepath.Base(p), "kusaw-lease-") {
			os.RemoveAll(p)
		}
		os.Remove(note)
	}
}

// PrepareWithParams is Prepare for a run with parameters (checked first):
// each becomes KUSAW_PARAM_<NAME> in its steps' environment, and they are
// kept in the run's params.json.
func (e *Engine) PrepareWithParams(pipeline string, params map[string]string) (*Run, error) {
	return e.prepareWithParams(pipeline, params, nil)
}

func (e *Engine) prepareWithParams(pipeline string, params map[string]string, init func(*record.RunRecord)) (*Run, error) {
	if err := CheckParams(params); err != nil {
		return nil, err
	}
	r, err := e.prepare(pipeline, init)
	if err != nil {
		return nil, err
	}
	if len(params) > 0 {
		r.params = params
		b, _ := json.Marshal(params)
		if err := config.WriteFileAtomic(filepath.Join(r.Dir, record.ParamsFile), b, record.FileMode()); err != nil {
			e.Abandon(r, status.RunCanceled, "cannot record the run's parameters: "+err.Error())
			return nil, err
		}
	}
	return r, nil
}

// sweepAttemptDirs cleans every attempt folder of an abandoned run, those
// without a record too (a crash between the folder and its attempt.json):
// tmp/, the lease folders and the emptied worktrees/ go, and a folder
// without a record gets one saying the attempt was interrupted.
func sweepAttemptDirs(runDir string, r *record.RunRecord, repos []*worktree.Repo, now time.Time) error {
	var errs []error
	stepDirs, _ := os.ReadDir(filepath.Join(runDir, record.StepsDir))
	for _, sd := range stepDirs {
		atts, _ := os.ReadDir(filepath.Join(runDir, record.StepsDir, sd.Name()))
		for _, ad := range atts {
			n, err := strconv.Atoi(ad.Name())
			if err != nil || !ad.IsDir() {
				continue
			}
			dir := filepath.Join(runDir, record.StepsDir, sd.Name(), ad.Name())
			os.RemoveAll(filepath.Join(dir, record.TmpDir))
			removeLeaseDirs(dir)
			// Registered worktrees were removed before; what is left is a
			// tree a crash caught between its pool slot and its
			// registration, in an attempt run.json did not list yet.
			if _, err := worktree.RemoveUnregistered(filepath.Join(dir, record.WorktreesDir), repos); err != nil {
				errs = append(errs, fmt.Errorf("%s attempt %d: %v", sd.Name(), n, err))
			}
			os.Remove(filepath.Join(dir, record.WorktreesDir))
			if _, err := os.Stat(filepath.Join(dir, record.AttemptFile)); errors.Is(err, os.ErrNotExist) {
				started := now
				if fi, err := os.Stat(dir); err == nil {
					started = fi.ModTime().UTC()
				}
				a := &record.AttemptRecord{Run: r.ID, Step: sd.Name(), Number: n, Started: started, Finished: &now,
					Worktrees: []record.WorktreeRecord{}, Processes: []record.ProcessRecord{},
					Outcome: status.OutcomeInterrupted, Reason: status.ReasonRunInterrupted,
					Message: "kusaw stopped while the attempt was being set up", Fix: status.ReasonRunInterrupted.Info().Fix}
				if err := writeJSON(filepath.Join(dir, record.AttemptFile), a); err != nil {
					errs = append(errs, err)
				}
				for i := range r.Steps {
					if st := &r.Steps[i]; st.ID == a.Step {
						st.Attempts = max(st.Attempts, n)
						if st.Outcome == "" {
							st.Outcome, st.Reason, st.Finished = status.OutcomeInterrupted, status.ReasonRunInterrupted, &now
						}
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}
