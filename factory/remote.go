package factory

import (
	"context"

	"github.com/kusaw/kusaw/attempt"
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

// remoteExecutor is the cluster's dispatch as an Executor: it hands the
// attempt to a worker and records what the worker did. serve writes
// attempt.json and the sealed events, moves the attempt branch to the
// worker's commits (imported and re-hashed by then) and, when the attempt
// passed, the run branch.
type remoteExecutor struct {
	e *Engine
	r *Run
	// reattach, when set, waits again for an attempt a previous serve
	// dispatched (serve was restarted while it ran), instead of a new
	// dispatch.
	reattach func(context.Context, *record.AttemptSpec, record.RemoteJob) record.RemoteResult
}

// Run dispatches the attempt (or re-attaches to it) and records its end.
func (x *remoteExecutor) Run(ctx context.Context, a *attempt.Attempt) *record.AttemptRecord {
	run := x.reattach
	if run == nil {
		// attempt.json first: if serve dies before a worker claims the
		// attempt, recovery finds it and closes its events.
		a.Save()
		run = x.e.opts.Remote.Run
	}
	e, r, spec := x.e, x.r, a.Spec()
	job := record.RemoteJob{Dir: a.Dir(), Repos: e.hostRepos(), Emit: a.Emit,
		Claimed: func(worker string, token uint64) {
			a.Update(func(rec *record.AttemptRecord) { rec.Worker, rec.Token = worker, token })
			a.Save()
		},
		Secret: func(key string) (string, error) {
			src, err := e.secretSource()
			if err != nil {
				return "", err
			}
			v, err := src.Get(key)
			if err == nil {
				r.redact.Add(v)
			}
			return v, err
		}}
	res := run(ctx, spec, job)
	if res.Worker != "" {
		a.Update(func(rec *record.AttemptRecord) { rec.Worker, rec.Token = res.Worker, res.Token })
	}
	switch {
	case res.Lost:
		a.SetOutcome(status.OutcomeLost, status.ReasonLost, res.Message)
		return a.Finish()
	case res.Record == nil && ctx.Err() != nil:
		a.SetOutcome(status.OutcomeCanceled, status.ReasonStepCanceled, "the run was canceled")
		return a.Finish()
	case res.Record == nil:
		a.SetOutcome(status.OutcomeFailed, status.ReasonInternal, res.Message)
		return a.Finish()
	}
	wr := res.Record
	rec := a.Record()
	rec.Processes, rec.Allowlist, rec.Egress, rec.ExitCode = wr.Processes, wr.Allowlist, wr.Egress, wr.ExitCode
	a.Decide(attempt.Verdict{Outcome: wr.Outcome, Reason: wr.Reason, Message: wr.Message, Fix: wr.Fix})
	changed := map[string]bool{}
	for _, w := range wr.Worktrees {
		changed[w.Repo] = w.Changed
	}
	repos := map[string]*worktree.Repo{}
	for _, sr := range spec.Repos {
		rr := r.repo(sr.Name)
		w := record.WorktreeRecord{Repo: sr.Name, RepoPath: rr.Path, Branch: sr.AttemptBranch, BaseSHA: sr.Base, HeadSHA: res.Heads[sr.Name], Changed: changed[sr.Name], Removed: true}
		repo, err := r.openRepo(sr.Name, rr.Path)
		var kept []string
		if cr := e.F.Repos[sr.Name]; err == nil && cr != nil && len(cr.Sparse) > 0 && w.HeadSHA != "" && w.HeadSHA != sr.Base {
			// A worker checks out the cone and commits by the rule too
			// (the spec carries the folders), but its commits are not
			// trusted: serve keeps repos.NAME.sparse's rule itself, as a
			// local attempt's commit does (what is outside the cone stays
			// as in the base).
			w.HeadSHA, kept, err = repo.KeepOutsideCone(sr.Base, w.HeadSHA, cr.Sparse)
		}
		if err == nil && w.HeadSHA != "" {
			err = repo.SetBranch(sr.AttemptBranch, "", w.HeadSHA)
		}
		if err != nil {
			a.Emit(record.EvCommitted, map[string]any{"repo": sr.Name, "error": err.Error()})
			a.CommitFailed(err.Error())
			w.HeadSHA = ""
		} else if w.HeadSHA != "" {
			d := map[string]any{"repo": sr.Name, "branch": w.Branch, "sha": w.HeadSHA, "changed": w.Changed, "worker": res.Worker}
			if len(kept) > 0 {
				d["kept_outside_sparse"] = len(kept) // paths the worker changed outside the cone, put back
			}
			a.Emit(record.EvCommitted, d)
		}
		repos[sr.Name] = repo
		rec.Worktrees = append(rec.Worktrees, w)
	}
	if rec.Outcome == status.OutcomePassed && !r.attemptOpt(spec.Step, spec.Number).Keep {
		for _, w := range rec.Worktrees {
			rr := r.repo(w.Repo)
			if w.HeadSHA == "" || w.HeadSHA == rr.HeadSHA {
				continue
			}
			if err := repos[w.Repo].AdvanceBranch(rr.Branch, w.HeadSHA); err != nil {
				a.CommitFailed(err.Error())
				break
			}
			rr.HeadSHA = w.HeadSHA
			a.Emit(record.EvBranchAdvanced, map[string]any{"repo": w.Repo, "branch": rr.Branch, "sha": w.HeadSHA})
		}
	}
	return a.Finish()
}

// remotable reports whether a shape's attempt can run on a worker: every
// part of its options travels in its spec (shapeSpec) and the worker
// lays it out itself (attempt.ShapeOf). A path of serve's in them cannot
// travel: only the handoff's folder is one, and it crosses as files. Every
// shape passes (TestShapesRemotable); a shape that adds a path of its own
// runs here until its spec carries it.
func remotable(o attempt.Shape) bool {
	if o.Resume != nil || o.KeepSession {
		return false // the previous attempt's session files are here
	}
	for _, p := range o.ReadOnly {
		if p != o.Handoff {
			return false
		}
	}
	return o.Handoff != "" || o.Note == ""
}
