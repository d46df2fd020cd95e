package factory

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/worktree"
)

// Remote runs attempts on other machines: serve's cluster dispatcher
// (docs/architecture.md, "The cluster"). It speaks record's plain data
// only, so the cluster never imports the engine.
type Remote interface {
	// Takes reports whether attempts of the pool run remotely.
	Takes(pool string) bool
	// Run runs the attempt on a worker and returns how it ended; the
	// attempt's commits are in the job's repositories by then.
	Run(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob) record.RemoteResult
	// Reattach waits again for an attempt a previous serve dispatched
	// and worker holds with token (serve was restarted while it ran).
	Reattach(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, worker string, token uint64) record.RemoteResult
	// Release gives up an attempt nobody will re-attach: its worker is
	// told to stop and its claim ends.
	Release(attemptID string)
}

// MaxLost is how many times a step's attempt may be lost (and dispatched
// again) without counting against its attempts.
const MaxLost = 3

// runRemote hands the attempt to the cluster and records what the worker
// did: serve writes attempt.json and the sealed events, moves the attempt
// branch to the worker's commits (imported and re-hashed by then) and,
// when the attempt passed, the run branch.
func (a *attemptRun) runRemote(ctx context.Context) *record.AttemptRecord {
	// attempt.json first: if serve dies before a worker claims the
	// attempt, recovery finds it and closes its events.
	a.save()
	return a.remote(ctx, func(job record.RemoteJob) record.RemoteResult { return a.e.opts.Remote.Run(ctx, a.spec, job) })
}

// remote waits for a remote attempt through run (a new dispatch or a
// re-attachment) and records what the worker did.
func (a *attemptRun) remote(ctx context.Context, run func(record.RemoteJob) record.RemoteResult) *record.AttemptRecord {
	spec := a.spec
	job := record.RemoteJob{Dir: a.dir, Repos: a.e.hostRepos(), Emit: a.events.Emit,
		Claimed: func(worker string, token uint64) {
			a.mu.Lock()
			a.rec.Worker, a.rec.Token = worker, token
			a.mu.Unlock()
			a.save()
		},
		Secret: func(key string) (string, error) {
			src, err := a.e.secretSource()
			if err != nil {
				return "", err
			}
			v, err := src.Get(key)
			if err == nil {
				a.run.redact.Add(v)
			}
			return v, err
		}}
	res := run(job)
	a.mu.Lock()
	if res.Worker != "" {
		a.rec.Worker, a.rec.Token = res.Worker, res.Token
	}
	a.mu.Unlock()
	switch {
	case res.Lost:
		a.setOutcome(status.OutcomeLost, status.ReasonLost, res.Message)
		return a.finish()
	case res.Record == nil && ctx.Err() != nil:
		a.setOutcome(status.OutcomeCanceled, status.ReasonStepCanceled, "the run was canceled")
		return a.finish()
	case res.Record == nil:
		a.setOutcome(status.OutcomeFailed, status.ReasonInternal, res.Message)
		return a.finish()
	}
	wr := res.Record
	a.rec.Processes, a.rec.Allowlist, a.rec.Egress, a.rec.ExitCode = wr.Processes, wr.Allowlist, wr.Egress, wr.ExitCode
	a.setOutcome(wr.Outcome, wr.Reason, wr.Message)
	a.rec.Fix = wr.Fix
	changed := map[string]bool{}
	for _, w := range wr.Worktrees {
		changed[w.Repo] = w.Changed
	}
	repos := map[string]*worktree.Repo{}
	for _, sr := range spec.Repos {
		rr := a.run.repo(sr.Name)
		w := record.WorktreeRecord{Repo: sr.Name, RepoPath: rr.Path, Branch: sr.AttemptBranch, BaseSHA: sr.Base, HeadSHA: res.Heads[sr.Name], Changed: changed[sr.Name], Removed: true}
		repo, err := a.run.openRepo(sr.Name, rr.Path)
		if err == nil && w.HeadSHA != "" {
			err = repo.SetBranch(sr.AttemptBranch, "", w.HeadSHA)
		}
		if err != nil {
			a.events.Emit(record.EvCommitted, map[string]any{"repo": sr.Name, "error": err.Error()})
			if a.rec.Outcome == status.OutcomePassed {
				a.setOutcome(status.OutcomeFailed, status.ReasonCommitFailed, err.Error())
			}
			w.HeadSHA = ""
		} else if w.HeadSHA != "" {
			a.events.Emit(record.EvCommitted, map[string]any{"repo": sr.Name, "branch": w.Branch, "sha": w.HeadSHA, "changed": w.Changed, "worker": res.Worker})
		}
		repos[sr.Name] = repo
		a.rec.Worktrees = append(a.rec.Worktrees, w)
	}
	if a.rec.Outcome == status.OutcomePassed && !a.opt.keep {
		for _, w := range a.rec.Worktrees {
			rr := a.run.repo(w.Repo)
			if w.HeadSHA == "" || w.HeadSHA == rr.HeadSHA {
				continue
			}
			if err := repos[w.Repo].AdvanceBranch(rr.Branch, w.HeadSHA); err != nil {
				a.setOutcome(status.OutcomeFailed, status.ReasonCommitFailed, err.Error())
				break
			}
			rr.HeadSHA = w.HeadSHA
			a.events.Emit(record.EvBranchAdvanced, map[string]any{"repo": w.Repo, "branch": rr.Branch, "sha": w.HeadSHA})
		}
	}
	return a.finish()
}

// RunForeign runs one attempt of another machine's run from its spec: a
// worker's attempt. It runs in this engine's state folder against repos
// (the worker's cache repositories by name), starting at the spec's base
// commits on a branch of its own per attempt, and returns the attempt's
// record and folder. Events go to Options.OnEvent as for any attempt.
func (e *Engine) RunForeign(ctx context.Context, spec *record.AttemptSpec, repos map[string]string) (*record.AttemptRecord, string, error) {
	if err := spec.Check(); err != nil {
		return nil, "", err
	}
	r := &Run{Record: &record.RunRecord{ID: spec.Run, Pipeline: "(remote)", State: status.RunRunning, Created: time.Now().UTC()},
		Dir: e.State.RunDir(spec.Run), e: e, redact: &redactor{}, params: spec.Params, skipSetup: len(spec.Setup) == 0, transient: true, unmade: map[string]bool{}}
	if err := os.MkdirAll(filepath.Join(r.Dir, record.StepsDir), record.DirMode()); err != nil {
		return nil, "", err
	}
	for _, sr := range spec.Repos {
		path := repos[sr.Name]
		if _, err := r.openRepo(sr.Name, path); err != nil {
			return nil, "", err
		}
		// A branch per attempt: attempts of one run may run here at once
		// from different bases.
		branch := worktree.RunBranch(spec.Run + "." + spec.Step + "." + strconv.Itoa(spec.Number))
		r.unmade[sr.Name] = true // made at sr.Base with the worktree (createWorktrees)
		// The run's starting commit, not the attempt's base: setup runs
		// outside the sandbox only on the former (setupPlace).
		r.Record.Repos = append(r.Record.Repos, record.RunRepo{Name: sr.Name, Path: path, BaseSHA: sr.RunBase, Branch: branch, HeadSHA: sr.Base})
	}
	opt, err := foreignOpts(spec, filepath.Join(r.Dir, "handoff", spec.Step, strconv.Itoa(spec.Number)))
	if err != nil {
		return nil, "", err
	}
	r.opts = map[string]attemptOpts{spec.ID: opt}
	rec := e.runSpecOn(ctx, r, spec, repos)
	return rec, record.AttemptDir(r.Dir, spec.Step, spec.Number), nil
}

// remotable reports whether a shape's attempt can run on a worker: every
// part of its options travels in its spec (shapeSpec) and the worker
// lays it out itself (foreignOpts). A path of serve's in them cannot
// travel: only the handoff's folder is one, and it crosses as files. Every
// shape passes (TestShapesRemotable); a shape that adds a path of its own
// runs here until its spec carries it.
func (o attemptOpts) remotable() bool {
	for _, p := range o.readOnly {
		if p != o.handoff {
			return false
		}
	}
	return o.handoff != "" || o.note == ""
}
