package factory

import (
	"context"
	"sync"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

// Executor runs an attempt the engine has opened (its folder, sealed
// events and record: attempt.Open) and returns its finished record. There
// are two: attempt.Local runs it on this machine, and the cluster's
// dispatch on a worker (remoteExecutor, through Options.Remote).
type Executor interface {
	Run(ctx context.Context, a *attempt.Attempt) *record.AttemptRecord
}

func openSecretStore() (SecretSource, error) { return secretstore.Open() }

// host is this machine as the attempt package sees it.
func (e *Engine) host() *attempt.Host {
	e.hostOnce.Do(func() {
		inc := map[string][]string{}
		for name, r := range e.F.Repos {
			if len(r.Include) > 0 {
				inc[name] = r.Include
			}
		}
		e.hostVal = &attempt.Host{StateDir: e.F.StateDir, Repos: e.hostRepos(), Include: inc, Kusaw: e.opts.Kusaw,
			KillGrace: e.opts.KillGrace, Key: e.opts.Key, InjectRootCAs: e.opts.InjectRootCAs, Hide: e.opts.Hide, OnEvent: e.opts.OnEvent,
			Secrets: func() (attempt.SecretSource, error) {
				src, err := e.secretSource()
				if err != nil {
					return nil, err
				}
				return src, nil
			},
			Proxy:        e.proxy,
			Upstream:     func() (*egress.Upstream, error) { return e.upstream(true) },
			SandboxCheck: e.checkSandbox,
		}
	})
	return e.hostVal
}

// job is attempt n of step in run r as the attempt package sees it.
func (e *Engine) job(r *Run, step string, n int) attempt.Job {
	r.mu.Lock()
	repos := append([]record.RunRepo(nil), r.Record.Repos...)
	r.mu.Unlock()
	return attempt.Job{Dir: record.AttemptDir(r.Dir, step, n), Repos: repos, Shape: r.attemptOpt(step, n), Redact: r.redact,
		OpenRepo: r.openRepo, Options: r.exec.Options, Interrupted: r.interrupted.Load,
		Refused: func(se *status.Error) {
			r.mu.Lock()
			r.refused = se
			r.mu.Unlock()
		},
		Refusal: func(d egress.Decision) { r.noteRefusal(step, n, d) },
		Advanced: func(repo, sha string) {
			if rr := r.repo(repo); rr != nil {
				rr.HeadSHA = sha
			}
		}}
}

// attempt runs attempt n (of the last number this occurrence may reach) of
// a step and returns its finished record. It resolves the attempt into its
// spec first and runs from that (docs/architecture.md, "The life of an
// attempt"): here, or on a worker when the cluster takes its pool.
func (e *Engine) attempt(ctx context.Context, r *Run, s *config.Step, n, of int) *record.AttemptRecord {
	if r.adopt(s.ID, n) {
		return e.reattach(ctx, r, s, n, of)
	}
	job := e.job(r, s.ID, n)
	spec, err := e.AttemptSpec(r, s, n, of)
	if err != nil {
		return attempt.Refuse(e.host(), e.partialSpec(r, s, n, of), job, err)
	}
	a := attempt.Open(e.host(), spec, job)
	return e.executor(r, spec, job.Shape).Run(ctx, a)
}

// executor is where the attempt runs: on a worker when the cluster takes
// its pool and its shape can travel, else here.
func (e *Engine) executor(r *Run, spec *record.AttemptSpec, shape attempt.Shape) Executor {
	if e.opts.Remote != nil && e.opts.Remote.Takes(spec.Pool) && remotable(shape) {
		return &remoteExecutor{e: e, r: r}
	}
	return attempt.Local{}
}

// runsRemote reports whether an attempt of s with shape goes to a worker
// (what executor decides from its spec).
func (e *Engine) runsRemote(s *config.Step, shape attempt.Shape) bool {
	pool := s.Pool
	if pool == "" {
		pool = config.DefaultPool
	}
	return e.opts.Remote != nil && e.opts.Remote.Takes(pool) && remotable(shape)
}

// partialSpec names an attempt whose spec could not be made, for its
// record.
func (e *Engine) partialSpec(r *Run, s *config.Step, n, of int) *record.AttemptSpec {
	return &record.AttemptSpec{Version: record.SpecVersion, ID: record.AttemptID(r.ID(), s.ID, n), Run: r.ID(), Step: s.ID,
		Number: n, Of: of, Setup: e.F.Setup, StepConfig: record.StepOf(s, s.Prompt)}
}

// sandboxCheck runs sandbox.Check once per engine: it starts bwrap once,
// which is worth doing once, not per attempt.
type sandboxCheck struct {
	once sync.Once
	res  sandbox.CheckResult
}

func (e *Engine) checkSandbox() sandbox.CheckResult {
	e.sbCheck.once.Do(func() {
		if e.opts.SandboxCheck != nil {
			e.sbCheck.res = e.opts.SandboxCheck()
		} else {
			e.sbCheck.res = sandbox.CachedCheck()
		}
	})
	return e.sbCheck.res
}
