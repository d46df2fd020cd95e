package factory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
	"github.com/kusaw/kusaw/worktree"
)

func openSecretStore() (SecretSource, error) { return secretstore.Open() }

// attemptRun is one attempt while it executes.
type attemptRun struct {
	e      *Engine
	f      *config.Factory // the attempt's view: the one-step factory of its spec
	spec   *record.AttemptSpec
	run    *Run
	step   *config.Step
	n      int
	dir    string
	rec    *record.AttemptRecord
	events *sink
	wts    map[string]*worktree.Worktree
	repos  map[string]*worktree.Repo

	mu         sync.Mutex
	egressOnce sync.Once
	egress     *egressObserver
	// egressEarly: egress.log is being made in the background while git
	// makes the worktrees (read a.egress through egressObs then).
	egressEarly bool
	// objDirs: repo → the private object folder of the sandbox in which it
	// was writable; its objects are imported before the commit.
	objDirs     map[string]string
	keepObjects bool // an import failed: the folder stays for inspection
	// refGuards: repo → the other attempts' branches beside this one's,
	// as they were before the step ran (the folder is writable inside).
	refGuards map[string]*worktree.RefGuard
	// setupInside: repos whose setup runs inside the sandbox, before the
	// step, because a sandboxed step may have written their commit.
	setupInside map[string]bool
	// refStores: repo → the private ref store its sandbox wrote (Linux).
	refStores map[string]string
	// opt: what the pipeline's shape asks of this attempt (pipeline.go).
	opt attemptOpts
	// extras: what worktree set-up gave the attempt (included files,
	// cache locks, leased ports).
	extras attemptExtras
	// limits watches the step's limits while the processes run.
	limits *limitWatch
	// unwarm stops proc.Prewarm once the process is placed.
	unwarm func()
}

// save writes attempt.json atomically. Process goroutines change their
// own entries under mu.
func (a *attemptRun) save() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.run.transient {
		_ = writeJSONVolatile(filepath.Join(a.dir, record.AttemptFile), a.rec)
		return
	}
	_ = writeJSON(filepath.Join(a.dir, record.AttemptFile), a.rec)
}

// fail ends the attempt with an outcome and a reason before or after its
// process.
func (a *attemptRun) setOutcome(o status.Outcome, r status.Reason, msg string) {
	if o == status.OutcomeCanceled && a.run.interrupted.Load() {
		o, r, msg = status.OutcomeInterrupted, status.ReasonRunInterrupted, "kusaw serve stopped while the attempt ran"
	}
	a.rec.Outcome, a.rec.Reason, a.rec.Message = o, r, a.run.redact.String(msg)
	if r != status.ReasonNone {
		a.rec.Fix = r.Info().Fix
	}
}

// attempt runs attempt n (of the last number this occurrence may reach) of
// a step and returns its finished record. It resolves the attempt into its
// spec first and runs from that (docs/architecture.md, "The life of an
// attempt"): a worker runs a remote attempt from the same spec.
func (e *Engine) attempt(ctx context.Context, r *Run, s *config.Step, n, of int) *record.AttemptRecord {
	if r.adopt(s.ID, n) {
		return e.reattach(ctx, r, s, n, of)
	}
	spec, err := e.AttemptSpec(r, s, n, of)
	if err != nil {
		a := e.newAttempt(r, s, n, of, e.F)
		if err := os.MkdirAll(a.dir, record.DirMode()); err == nil {
			a.events = e.attemptSink(r, filepath.Join(a.dir, record.EventsFile), s.ID, n)
		} else {
			a.events = &sink{run: r.ID(), step: s.ID, attempt: n, emit: e.opts.OnEvent}
		}
		a.setOutcome(status.OutcomeFailed, status.ReasonStepStartFailed, err.Error())
		return a.finish()
	}
	return e.runSpec(ctx, r, spec)
}

// newAttempt is the running form of an attempt of step s in the factory f
// (the engine's own, or the one-step view of a spec).
func (e *Engine) newAttempt(r *Run, s *config.Step, n, of int, f *config.Factory) *attemptRun {
	a := &attemptRun{e: e, f: f, run: r, step: s, n: n, dir: record.AttemptDir(r.Dir, s.ID, n), wts: map[string]*worktree.Worktree{}, repos: map[string]*worktree.Repo{},
		opt: r.attemptOpt(s.ID, n)}
	a.rec = &record.AttemptRecord{Run: r.ID(), Step: s.ID, Number: n, Of: of, Kind: s.Kind(), Builtin: s.Builtin,
		Setup: f.Setup, Started: time.Now().UTC(), Worktrees: []record.WorktreeRecord{}, Processes: []record.ProcessRecord{}, Role: a.opt.role}
	if s.Kind() == config.KindAgent {
		a.rec.Provider = s.Provider
	}
	if s.Timeout > 0 {
		a.rec.Timeout = s.Timeout.String()
	}
	return a
}

// runSpec runs an attempt from its spec with the factory's repos: on this
// machine, or on a worker when the cluster takes its pool.
func (e *Engine) runSpec(ctx context.Context, r *Run, spec *record.AttemptSpec) *record.AttemptRecord {
	return e.runSpecOn(ctx, r, spec, e.hostRepos())
}

// runSpecOn runs an attempt from its spec with the repos at paths.
func (e *Engine) runSpecOn(ctx context.Context, r *Run, spec *record.AttemptSpec, paths map[string]string) *record.AttemptRecord {
	f, s := spec.Factory(e.F.StateDir, paths)
	a := e.newAttempt(r, s, spec.Number, spec.Of, f)
	a.spec = spec
	n, of, dir := spec.Number, spec.Of, a.dir
	procs := make([][]string, len(spec.Processes))
	for i, p := range spec.Processes {
		procs[i] = p.Repos
	}
	a.rec.Mode, a.rec.ModeOrigin, a.rec.Network = spec.Mode, spec.ModeOrigin, spec.Network

	for _, sub := range []string{record.ArtifactsDir, record.TmpDir, record.WorktreesDir} {
		perm := os.FileMode(record.DirMode())
		if sub == record.TmpDir {
			perm = 0o700
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), perm); err != nil {
			a.events = &sink{run: r.ID(), step: s.ID, attempt: n, emit: e.opts.OnEvent}
			a.setOutcome(status.OutcomeFailed, status.ReasonInternal, "cannot create the attempt folder: "+err.Error())
			return a.finish()
		}
	}
	a.events = e.attemptSink(r, filepath.Join(dir, record.EventsFile), s.ID, n)
	started := map[string]any{"attempt": n, "of": of, "kind": s.Kind(), "mode": a.rec.Mode, "mode_origin": a.rec.ModeOrigin, "network": a.rec.Network}
	if a.rec.Role != nil {
		// The sealed events say what a helper's attempt was for too.
		started["role"] = a.rec.Role
	}
	a.events.Emit(record.EvAttemptStarted, started)

	if b, err := spec.Marshal(); err == nil {
		_ = os.WriteFile(filepath.Join(dir, record.SpecFile), b, record.FileMode())
	}
	if e.opts.Remote != nil && e.opts.Remote.Takes(spec.Pool) && a.opt.remotable() {
		return a.runRemote(ctx)
	}
	// The kernel's wait before the first cgroup move after a pause is
	// taken now, beside the git work, not at the process's start.
	a.unwarm = proc.Prewarm(a.resources())
	defer a.unwarm()
	if a.rec.Mode == config.ModeRequired && a.rec.Network.Proxied() {
		// The lease needs egress.log; making it now, beside the git
		// work, keeps its wait on the disk (milliseconds now and then)
		// off the step's start.
		a.egressEarly = true
		go a.egressLog()
	}
	if err := a.createWorktrees(); err != nil {
		a.setOutcome(status.OutcomeFailed, status.ReasonWorktreeFailed, err.Error())
		return a.finish()
	}
	if err := a.startMerges(); err != nil {
		a.setOutcome(status.OutcomeFailed, status.ReasonWorktreeFailed, err.Error())
		return a.finish()
	}
	if err := a.exportCandidates(); err != nil {
		a.setOutcome(status.OutcomeFailed, status.ReasonWorktreeFailed, err.Error())
		return a.finish()
	}
	if err := a.includeFiles(); err != nil {
		a.setOutcome(status.OutcomeFailed, status.ReasonSetupFailed, err.Error())
		return a.finish()
	}
	if err := a.setup(ctx); err != nil {
		if ctx.Err() != nil {
			a.setOutcome(status.OutcomeCanceled, status.ReasonStepCanceled, "canceled during setup")
		} else {
			a.setOutcome(status.OutcomeFailed, status.ReasonSetupFailed, err.Error())
		}
		return a.finish()
	}
	a.guardRefs()
	release, err := a.holdResources(ctx)
	if err != nil {
		if ctx.Err() != nil {
			a.setOutcome(status.OutcomeCanceled, status.ReasonStepCanceled, "canceled while waiting for a cache")
		} else {
			a.setOutcome(status.OutcomeFailed, status.ReasonSetupFailed, err.Error())
		}
		return a.finish()
	}
	a.runProcesses(ctx, procs)
	release()
	a.commit()
	return a.finish()
}

// createWorktrees adds a worktree per active repo on the attempt branch,
// from the run branch. The planned worktrees are recorded first, so a crash
// in the middle leaves enough for recovery to remove them.
func (a *attemptRun) createWorktrees() error {
	runID := a.run.ID()
	for _, name := range a.f.ActiveRepos(a.step) {
		rr := a.run.repo(name)
		a.rec.Worktrees = append(a.rec.Worktrees, record.WorktreeRecord{Repo: name, RepoPath: rr.Path,
			Path: filepath.Join(a.dir, record.WorktreesDir, name), Branch: worktree.AttemptBranch(runID, a.step.ID, a.n)})
	}
	a.save()
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		repo, err := a.run.openRepo(w.Repo, w.RepoPath)
		if err != nil {
			return fmt.Errorf("repo %s: %v", w.Repo, err)
		}
		from := a.run.repo(w.Repo).Branch
		if b := a.opt.from[w.Repo]; b != "" {
			from = b
		}
		wt, err := a.addAttempt(repo, w.Repo, from, w.Branch, w.Path)
		if err != nil {
			return fmt.Errorf("repo %s: %v", w.Repo, err)
		}
		a.repos[w.Repo], a.wts[w.Repo] = repo, wt
		w.GitDir, w.BaseSHA, w.Path = wt.GitDir, wt.BaseSHA, wt.Path
		a.events.Emit(record.EvWorktreeCreated, map[string]any{"repo": w.Repo, "path": w.Path, "branch": w.Branch, "base": w.BaseSHA})
	}
	return nil
}

// addAttempt adds the attempt's worktree of repo name from branch from;
// a run branch RunForeign left unmade is made first, with the attempt's
// own branch when the attempt starts from it.
func (a *attemptRun) addAttempt(repo *worktree.Repo, name, from, branch, path string) (*worktree.Worktree, error) {
	a.run.mu.Lock()
	unmade := a.run.unmade[name]
	delete(a.run.unmade, name)
	a.run.mu.Unlock()
	if !unmade {
		return repo.AddAttempt(from, branch, path)
	}
	rr := a.run.repo(name)
	if from == rr.Branch {
		return repo.AddAttemptNewRun(from, rr.HeadSHA, branch, path)
	}
	if err := repo.SetBranch(rr.Branch, "", rr.HeadSHA); err != nil {
		return nil, err
	}
	return repo.AddAttempt(from, branch, path)
}

// setup runs the factory's setup commands in each new worktree, with the
// attempt's KUSAW_* variables but none of the step's secrets. Output goes
// to setup.log.
//
// Code a sandboxed step wrote never runs outside a sandbox: setup runs on
// the host only on the commit the run started from (the user's own, with
// no merge into it), or when the attempt itself runs unsandboxed (its step
// then runs that code on the host anyway). Otherwise it runs inside the
// attempt's sandbox, just before the step (setupInside).
func (a *attemptRun) setup(ctx context.Context) error {
	if len(a.f.Setup) == 0 || a.run.skipSetup {
		return nil
	}
	var host []record.WorktreeRecord
	for _, w := range a.rec.Worktrees {
		where, why := a.setupPlace(w)
		a.events.Emit(record.EvSetupWhere, map[string]any{"repo": w.Repo, "where": where, "why": why})
		if where == setupInSandbox {
			if a.setupInside == nil {
				a.setupInside = map[string]bool{}
			}
			a.setupInside[w.Repo] = true
			continue
		}
		host = append(host, w)
	}
	if len(host) == 0 {
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(a.dir, record.SetupLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, record.FileMode())
	if err != nil {
		return err
	}
	defer logf.Close()
	for _, w := range host {
		env := steps.HostEnv(os.Environ(), steps.TempEnv(filepath.Join(a.dir, record.TmpDir)), map[string]string{
			steps.EnvRun: a.run.ID(), steps.EnvStep: a.step.ID, steps.EnvAttempt: fmt.Sprint(a.n),
			steps.EnvArtifacts: filepath.Join(a.dir, record.ArtifactsDir), steps.EnvWorktreePrefix + steps.EnvName(w.Repo): w.Path,
		})
		for _, argv := range a.f.Setup {
			fmt.Fprintf(logf, "== %s: %s\n", w.Repo, strings.Join(argv, " "))
			start := time.Now()
			res := a.e.runProcess(ctx, 0, &exec.Cmd{Path: lookPath(argv[0]), Args: argv, Dir: w.Path, Env: env}, logf, logf, nil, nil)
			a.events.Emit(record.EvSetupFinished, map[string]any{"repo": w.Repo, "argv": argv, "exit_code": res.exit, "duration_ms": time.Since(start).Milliseconds()})
			if res.startErr != nil {
				return fmt.Errorf("setup %q in %s: %v", strings.Join(argv, " "), w.Repo, res.startErr)
			}
			if res.exit != 0 || res.signal != "" {
				return fmt.Errorf("setup %q in %s exited with %s (see setup.log)", strings.Join(argv, " "), w.Repo, res.describe())
			}
		}
	}
	return nil
}

const (
	setupOnHost    = "host"
	setupInSandbox = "sandbox"
)

// setupPlace decides where setup runs in worktree w, and says why.
func (a *attemptRun) setupPlace(w record.WorktreeRecord) (string, string) {
	rr := a.run.repo(w.Repo)
	if rr != nil && w.BaseSHA == rr.BaseSHA && a.opt.merge[w.Repo] == "" {
		return setupOnHost, "the commit the run started from: no step of the run has written it"
	}
	if a.rec.Mode != config.ModeRequired {
		return setupOnHost, "the step runs outside a sandbox, on the same code"
	}
	return setupInSandbox, "a step of the run may have written this commit: its code runs only inside a sandbox"
}

// setupMarker is where the in-sandbox setup leaves the failing command
// (the attempt's tmp folder, writable inside): it tells a setup failure
// from the step's own.
const setupMarker = ".kusaw-setup-failed"

// withSetup wraps a sandboxed process's argv so the factory's setup
// commands run first, inside the same sandbox, in each of the repos whose
// setup was kept from the host. Setup's output goes to stderr: stdout may
// be an agent's stream.
func (a *attemptRun) withSetup(argv, repos []string) []string {
	var b strings.Builder
	b.WriteString("d=$(pwd) || exit 1\n")
	marker := shQuote(filepath.Join(a.dir, record.TmpDir, setupMarker))
	n := 0
	for _, w := range a.rec.Worktrees {
		if !a.setupInside[w.Repo] || !slices.Contains(repos, w.Repo) {
			continue
		}
		for _, cmd := range a.f.Setup {
			n++
			q := make([]string, len(cmd))
			for i, c := range cmd {
				q[i] = shQuote(c)
			}
			what := shQuote(fmt.Sprintf("setup %q in %s", strings.Join(cmd, " "), w.Repo))
			fmt.Fprintf(&b, "cd %s || exit 1\n", shQuote(w.Path))
			fmt.Fprintf(&b, "printf '== setup (sandboxed) %%s\\n' %s >&2\n", what)
			fmt.Fprintf(&b, "%s >&2 || { s=$?; printf '%%s exited with exit code %%s (inside the sandbox; see stderr.log)\\n' %s \"$s\" > %s; exit \"$s\"; }\n",
				strings.Join(q, " "), what, marker)
		}
	}
	if n == 0 {
		return argv
	}
	b.WriteString("cd \"$d\" || exit 1\nexec \"$@\"\n")
	return append([]string{"/bin/sh", "-c", b.String(), "kusaw-setup"}, argv...)
}

// shQuote quotes s for sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// setupFailed reads the marker the in-sandbox setup leaves when a command
// fails: a small regular file (the step could have written anything there,
// so nothing else is opened).
func (a *attemptRun) setupFailed() (string, bool) {
	p := filepath.Join(a.dir, record.TmpDir, setupMarker)
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return "", false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func lookPath(name string) string {
	if strings.ContainsRune(name, '/') {
		return name
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return name
}

// runProcesses starts the attempt's processes (one, or one per repo with
// per_repo) and classifies the attempt from how they ended.
func (a *attemptRun) runProcesses(ctx context.Context, procs [][]string) {
	actx := ctx
	var cancel context.CancelFunc
	if a.step.Timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, a.step.Timeout)
		defer cancel()
	}
	// A crossed step limit stops every process of the attempt.
	lctx, lstop := context.WithCancelCause(actx)
	defer lstop(nil)
	a.limits = newLimitWatch(a.step.Limits, lstop, func(le *limitError) { a.events.Emit(record.EvLimitReached, le.data()) })
	if a.spec != nil && a.spec.Deadline != nil {
		a.limits.deadline(*a.spec.Deadline)
	}
	defer a.limits.close()
	results := make([]procResult, len(procs))
	a.rec.Processes = make([]record.ProcessRecord, len(procs))
	// Prepare every process first: a refusal refuses the whole attempt
	// before anything starts.
	cmds := make([]*preparedProc, len(procs))
	for i, repos := range procs {
		p, err := a.prepare(i, repos, len(procs) > 1)
		if err != nil {
			for _, q := range cmds[:i] {
				q.release()
			}
			var se *status.Error
			if errors.As(err, &se) {
				a.setOutcome(status.OutcomeRefused, se.Reason, se.Msg)
				a.rec.Fix = se.Fix
				if record.IsSandboxReason(se.Reason) {
					a.run.mu.Lock()
					a.run.refused = se
					a.run.mu.Unlock()
				}
			} else {
				a.setOutcome(status.OutcomeFailed, status.ReasonStepStartFailed, err.Error())
			}
			return
		}
		cmds[i] = p
	}
	var wg sync.WaitGroup
	for i, p := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = a.execute(lctx, i, p)
		}()
	}
	wg.Wait()

	// The attempt's outcome: canceled and timed out win, then the first
	// process that did not pass.
	a.setOutcome(status.OutcomePassed, status.ReasonNone, "")
	for i, res := range results {
		pr := &a.rec.Processes[i]
		// A process that ended on its own before a cancel or timeout is
		// judged by how it ended; only one kusaw stopped is canceled or
		// timed out.
		stopped := res.stopped || (res.startErr != nil && actx.Err() != nil)
		switch {
		case stopped && ctx.Err() != nil:
			pr.Outcome, pr.Reason, pr.Message = status.OutcomeCanceled, status.ReasonStepCanceled, "the run was canceled"
		case stopped && actx.Err() != nil:
			pr.Outcome, pr.Reason, pr.Message = status.OutcomeTimedOut, status.ReasonStepTimeout, fmt.Sprintf("the step ran longer than its timeout (%s)", a.step.Timeout)
		case res.limit != "":
			pr.Outcome, pr.Reason, pr.Message = status.OutcomeFailed, status.ReasonResourceLimit,
				fmt.Sprintf("the step reached its %s limit (%s; sandbox.resources.%s)", res.limit, res.limitValue, res.limit)
		case a.limits.reached() != nil:
			pr.Outcome, pr.Reason, pr.Message = status.OutcomeFailed, status.ReasonLimitReached, a.limits.reached().Error()
		case res.stopped && errors.Is(res.cause, errAfterResult):
			// Stopped by kusaw after its result: the result decides, not
			// the signal that ended it.
			pr.Outcome, pr.Reason, pr.Message = res.parsed.outcome(0)
		case stopped:
			pr.Outcome, pr.Reason, pr.Message = status.OutcomeTimedOut, status.ReasonStepTimeout, fmt.Sprintf("the step ran longer than its timeout (%s)", a.step.Timeout)
		case res.startErr != nil:
			pr.Outcome, pr.Reason, pr.Message = status.OutcomeFailed, status.ReasonStepStartFailed, res.startErr.Error()
		default:
			pr.Outcome, pr.Reason, pr.Message = res.classify()
			if msg, failed := a.setupFailed(); failed && pr.Outcome != status.OutcomePassed {
				pr.Outcome, pr.Reason, pr.Message = status.OutcomeFailed, status.ReasonSetupFailed, msg
			}
			if o := a.egressObs(); pr.Outcome == status.OutcomeFailed && o != nil && o.budgetHit() {
				pr.Reason, pr.Message = status.ReasonEgressBudget, pr.Message+"; an egress byte budget was reached (see egress.log)"
			}
		}
		if pr.Outcome != status.OutcomePassed && (a.rec.Outcome == status.OutcomePassed || rank(pr.Outcome) > rank(a.rec.Outcome)) {
			a.setOutcome(pr.Outcome, pr.Reason, pr.Message)
			if res.hasExit {
				x := res.exit
				a.rec.ExitCode = &x
			}
		}
	}
	for _, res := range results {
		if res.parsed.usage != nil {
			if a.rec.Usage == nil {
				a.rec.Usage = &record.Usage{}
			}
			a.rec.Usage.Merge(res.parsed.usage)
		}
	}
	if a.rec.Outcome == status.OutcomePassed && len(results) > 0 {
		x := 0
		a.rec.ExitCode = &x
	}
}

func rank(o status.Outcome) int {
	switch o {
	case status.OutcomeCanceled:
		return 4
	case status.OutcomeTimedOut:
		return 3
	case status.OutcomeRefused:
		return 2
	case status.OutcomeFailed:
		return 1
	}
	return 0
}

// preparedProc is a process ready to start.
type preparedProc struct {
	cmd     *exec.Cmd
	stdout  string
	stderr  string
	cleanup func()
	parse   func(io.Reader, func(providers.Event)) procParse // agent steps: reads the stream, telling the watcher each event
	// exitGrace is how long an agent may take to exit after its result.
	exitGrace time.Duration
	// loginPaths are the agent's own state folders, mounted in the sandbox.
	loginPaths []string
	// readPaths must be readable in the sandbox (the agent CLI's install).
	readPaths []string
	// egressHosts are the provider's hosts for the allowlist.
	egressHosts []string
	lease       *egress.Lease
	probe       *record.ProviderProbe
}

// release runs the cleanup of a process that will not start.
func (p *preparedProc) release() {
	if p.cleanup != nil {
		p.cleanup()
		p.cleanup = nil
	}
}

// procParse is what an agent's stream said, and how to turn it and the
// exit status into an outcome.
type procParse struct {
	result  any
	usage   *record.Usage // what the provider reported (nil: nothing)
	outcome func(exit int) (status.Outcome, status.Reason, string)
}

// prepare builds process i: the step's spec, its environment with secrets
// resolved, and (when required) the sandbox around it.
func (a *attemptRun) prepare(i int, repos []string, many bool) (*preparedProc, error) {
	var wts []steps.Worktree
	for _, w := range a.rec.Worktrees {
		wts = append(wts, steps.Worktree{Repo: w.Repo, Path: w.Path, BaseSHA: a.run.repo(w.Repo).BaseSHA})
	}
	at := steps.Attempt{Run: a.run.ID(), Step: a.step, Number: a.n, Repos: repos, Worktrees: wts,
		Artifacts: filepath.Join(a.dir, record.ArtifactsDir), Tmp: filepath.Join(a.dir, record.TmpDir), Kusaw: a.e.opts.Kusaw}
	spec, err := steps.Build(at)
	if err != nil {
		return nil, err
	}
	p := &preparedProc{stdout: record.StdoutFile, stderr: record.StderrFile}
	if many {
		p.stdout, p.stderr = "stdout-"+repos[0]+".log", "stderr-"+repos[0]+".log"
	}
	m, _ := a.f.EffectiveMode(a.step, repos)
	if spec.Kind == config.KindAgent {
		if err := a.agentSpec(spec, at, p, m == config.ModeRequired); err != nil {
			return nil, err
		}
	}
	pr := &a.rec.Processes[i]
	pr.Repos, pr.Dir, pr.Argv, pr.Stdout, pr.Stderr = repos, spec.Dir, spec.Argv, p.stdout, p.stderr
	pr.Probe = p.probe
	pr.Env = map[string]string{}
	for k, v := range spec.Env {
		pr.Env[k] = v
	}
	for k := range spec.Secrets {
		pr.Env[k] = secretRedacted
	}
	// Secrets are resolved only now, just before the start, and go only to
	// the process's environment and the redactor.
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	a.run.paramEnv(env, pr.Env)
	for k, v := range a.opt.env {
		env[k], pr.Env[k] = v, v
	}
	p.readPaths = append(p.readPaths, a.opt.readOnly...)
	a.resourceEnv(env)
	a.resourceEnv(pr.Env)
	if len(spec.Secrets) > 0 {
		src, err := a.e.secretSource()
		if err != nil {
			return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: "cannot open the secret store: " + err.Error(), Fix: status.ReasonSecretMissing.Info().Fix}
		}
		for name, key := range spec.Secrets {
			v, err := src.Get(key)
			if err != nil {
				return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: fmt.Sprintf("env %s: secret %s is not in the secret store", name, key),
					Fix: "kusaw config set " + key + " --secret"}
			}
			a.run.redact.Add(v)
			env[name] = v
		}
	}
	if m == config.ModeRequired {
		spec.Argv = a.withSetup(spec.Argv, repos)
		if err := a.sandboxed(i, repos, spec, env, p); err != nil {
			return nil, err
		}
		return p, nil
	}
	cmd := &exec.Cmd{Path: lookPath(spec.Argv[0]), Args: spec.Argv, Dir: spec.Dir,
		Env: steps.HostEnv(os.Environ(), steps.TempEnv(at.Tmp), env)}
	for _, d := range []string{"cache", "run"} {
		_ = os.MkdirAll(filepath.Join(at.Tmp, d), 0o700)
	}
	// Without a sandbox, a child subreaper between kusaw and the process
	// ends what it starts in the background when kusaw dies.
	proc.Reaped(cmd)
	p.cmd = cmd
	return p, nil
}

// execute runs one prepared process and records how it ended.
func (a *attemptRun) execute(ctx context.Context, i int, p *preparedProc) procResult {
	pr := &a.rec.Processes[i]
	outf, err1 := os.OpenFile(filepath.Join(a.dir, p.stdout), os.O_CREATE|os.O_WRONLY|os.O_APPEND, record.FileMode())
	errf, err2 := os.OpenFile(filepath.Join(a.dir, p.stderr), os.O_CREATE|os.O_WRONLY|os.O_APPEND, record.FileMode())
	if err := errors.Join(err1, err2); err != nil {
		return procResult{startErr: err}
	}
	defer outf.Close()
	defer errf.Close()
	if p.cleanup != nil {
		defer p.cleanup()
	}
	var stdout io.Writer = outf
	var stderr io.Writer = errf
	// kusaw sandbox exec streams the process's output to the terminal too.
	if a.run.tee.stdout != nil {
		stdout = io.MultiWriter(outf, a.run.tee.stdout)
	}
	if a.run.tee.stderr != nil {
		stderr = io.MultiWriter(errf, a.run.tee.stderr)
	}
	// pctx ends this process alone (its exit grace after the result ran out).
	pctx, pstop := context.WithCancelCause(ctx)
	defer pstop(nil)
	var parsed chan procParse
	var pw *io.PipeWriter
	var rw *resultWatch
	if p.parse != nil {
		var pipeR *io.PipeReader
		pipeR, pw = io.Pipe()
		stdout = io.MultiWriter(stdout, pw)
		parsed = make(chan procParse, 1)
		rw = &resultWatch{i: i, limits: a.limits, grace: p.exitGrace, stop: pstop}
		go func() {
			res := p.parse(pipeR, rw.event)
			_, _ = io.Copy(io.Discard, pipeR)
			parsed <- res
		}()
	}
	started := func(pid int) {
		if a.unwarm != nil {
			a.unwarm()
		}
		start, _ := proc.StartID(pid)
		a.mu.Lock()
		pr.PID, pr.Start = pid, start
		a.mu.Unlock()
		// The event first: it seals the attempt's log so far (a
		// checkpoint), so once attempt.json names the process, a crash
		// leaves nothing of the start unsealed.
		a.events.Emit(record.EvProcessStarted, map[string]any{"pid": pid, "argv": pr.Argv, "dir": pr.Dir, "repos": pr.Repos, "limits": limitsData(a.resources())})
		a.save()
	}
	lim := a.resources()
	res := a.e.runLimited(pctx, a.e.opts.KillGrace, p.cmd, stdout, stderr, started, a.run.redact, lim)
	if rw != nil {
		rw.finish()
	}
	if res.stopped {
		res.cause = context.Cause(pctx)
		if errors.Is(res.cause, errAfterResult) {
			a.events.Emit(record.EvStoppedAfterResult, map[string]any{"exit_grace_ms": p.exitGrace.Milliseconds(),
				"note": "the agent printed its result but did not exit; kusaw stopped it (SIGTERM, then SIGKILL) and its result decides"})
		}
	}
	if p.lease != nil && res.startErr == nil && !p.lease.HandedOver() {
		res.bridgeFailed = true
	}
	a.mu.Lock()
	if pw != nil {
		pw.Close()
		res.parsed = <-parsed
		pr.Result = res.parsed.result
	}
	if res.hasExit {
		x := res.exit
		pr.Exit = &x
	}
	pr.Signal = res.signal
	a.mu.Unlock()
	data := map[string]any{"exit_code": res.exit, "duration_ms": res.dur.Milliseconds()}
	if res.signal != "" {
		data["signal"] = res.signal
	}
	if res.startErr != nil {
		data["error"] = res.startErr.Error()
	}
	a.events.Emit(record.EvProcessExited, data)
	return res
}

// procResult is how one process ended.
type procResult struct {
	startErr error
	hasExit  bool
	exit     int
	signal   string
	dur      time.Duration
	parsed   procParse
	stopped  bool  // kusaw signalled it (timeout, cancel, limit, or after its result)
	cause    error // why kusaw stopped it
	// limit names the sandbox.resources limit the process reached, and
	// limitValue its value.
	limit, limitValue string
	// bridgeFailed: the egress bridge never handed its listener over, so
	// the step itself did not run.
	bridgeFailed bool
}

func (r procResult) describe() string {
	return proc.Result{Signal: r.signal, Exit: r.exit}.Describe()
}

func (r procResult) classify() (status.Outcome, status.Reason, string) {
	if r.bridgeFailed && (r.exit != 0 || r.signal != "") {
		return status.OutcomeFailed, status.ReasonEgressBridgeFailed, "the egress bridge could not hand its listener to the proxy (" + r.describe() + "); the step did not run"
	}
	if r.parsed.outcome != nil {
		return r.parsed.outcome(r.exit)
	}
	if r.exit == 0 && r.signal == "" {
		return status.OutcomePassed, status.ReasonNone, ""
	}
	return status.OutcomeFailed, status.ReasonStepExitNonzero, "the process ended with " + r.describe()
}

// runProcess runs cmd under internal/proc (its own process group,
// SIGTERM then SIGKILL after grace when ctx ends), copying its output
// through the redactor.
func (e *Engine) runProcess(ctx context.Context, grace time.Duration, cmd *exec.Cmd, stdout, stderr io.Writer, started func(int), red *redactor) procResult {
	return e.runLimited(ctx, grace, cmd, stdout, stderr, started, red, proc.Limits{})
}

// runLimited is runProcess under resource limits (sandbox.resources).
func (e *Engine) runLimited(ctx context.Context, grace time.Duration, cmd *exec.Cmd, stdout, stderr io.Writer, started func(int), red *redactor, lim proc.Limits) procResult {
	if grace <= 0 {
		grace = e.opts.KillGrace
	}
	r := proc.Run(ctx, cmd, proc.Options{Grace: grace, Stdout: stdout, Stderr: stderr, Started: started, Copy: red.copyRedacted, Limits: lim})
	res := procResult{startErr: r.StartErr, hasExit: r.HasExit, exit: r.Exit, signal: r.Signal, dur: r.Dur, stopped: r.Stopped, limit: r.Limit}
	if r.Limit != "" {
		res.limitValue = lim.Value(r.Limit)
	}
	return res
}

// resources are the limits of the attempt's processes: the step's
// sandbox.resources over the factory's, kusaw's defaults for the rest;
// disk counts the attempt's tmp folder and worktrees.
func (a *attemptRun) resources() proc.Limits {
	r := a.f.EffectiveResources(a.step)
	l := proc.Defaults(proc.Limits{Pids: r.Pids, Memory: r.Memory, CPU: r.CPU, Disk: r.Disk, Output: r.Output})
	l.DiskPaths = []string{filepath.Join(a.dir, record.TmpDir), filepath.Join(a.dir, record.WorktreesDir)}
	return l
}

// commit commits each worktree's changes on the attempt branch (whatever the
// outcome: failed attempts keep their branch) and, when the attempt passed,
// advances the run branch to it.
func (a *attemptRun) commit() {
	if len(a.wts) == 0 {
		return
	}
	a.restoreRefs()
	a.dropIncluded()
	msg := fmt.Sprintf("kusaw: run %s, step %s, attempt %d (%s)", a.run.ID(), a.step.ID, a.n, a.rec.Outcome)
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		wt := a.wts[w.Repo]
		if wt == nil {
			continue
		}
		if err := a.takeStepRefs(w.Repo, wt); err != nil {
			a.events.Emit(record.EvCommitted, map[string]any{"repo": w.Repo, "error": err.Error()})
			if a.rec.Outcome == status.OutcomePassed {
				a.setOutcome(status.OutcomeFailed, status.ReasonCommitFailed, err.Error())
			}
		}
		sha, changed, err := wt.CommitAll(msg)
		if err != nil {
			a.events.Emit(record.EvCommitted, map[string]any{"repo": w.Repo, "error": err.Error()})
			if a.rec.Outcome == status.OutcomePassed {
				a.setOutcome(status.OutcomeFailed, status.ReasonCommitFailed, err.Error())
			}
			continue
		}
		w.HeadSHA, w.Changed = sha, changed
		a.events.Emit(record.EvCommitted, map[string]any{"repo": w.Repo, "branch": w.Branch, "sha": sha, "changed": changed})
	}
	if a.rec.Outcome != status.OutcomePassed || a.opt.keep {
		return
	}
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		rr := a.run.repo(w.Repo)
		if w.HeadSHA == "" || w.HeadSHA == rr.HeadSHA {
			continue
		}
		if err := a.repos[w.Repo].AdvanceBranch(rr.Branch, w.HeadSHA); err != nil {
			a.setOutcome(status.OutcomeFailed, status.ReasonCommitFailed, err.Error())
			return
		}
		rr.HeadSHA = w.HeadSHA
		a.events.Emit(record.EvBranchAdvanced, map[string]any{"repo": w.Repo, "branch": rr.Branch, "sha": w.HeadSHA})
	}
}

// takeStepRefs makes what the step left in its git folders safe for
// kusaw's own git, then takes the step's commits: from the private ref
// store when it had one, else from the branch's own folder, checked. The
// objects those commits need are verified into the repository first, or
// the branch stays at (goes back to) its base; the files are committed
// either way.
func (a *attemptRun) takeStepRefs(repo string, wt *worktree.Worktree) error {
	found, err := worktree.Scrub(wt.GitDir)
	var more []worktree.Finding
	var terr error
	od := a.objectDir(repo)
	if od != "" {
		f, oerr := worktree.ScrubObjects(od)
		found, err = append(found, f...), errors.Join(err, oerr)
	}
	if f, nerr := worktree.ScrubNested(wt.Path); len(f) > 0 || nerr != nil {
		found, err = append(found, f...), errors.Join(err, nerr)
	}
	if store := a.refStore(repo); store != "" {
		more, terr = wt.AdoptFromStore(store, od)
		if terr != nil && len(more) == 0 {
			a.keepObjects = true
		}
	} else {
		more, err = wt.CheckOwnRef()
		if od != "" {
			if terr = wt.ImportObjects(od); terr != nil {
				a.keepObjects = true
			}
		}
	}
	for _, f := range append(found, more...) {
		a.events.Emit(record.EvLeftBehind, map[string]any{"repo": repo, "path": f.Path, "kind": f.Kind, "action": f.Action})
	}
	if err != nil {
		a.events.Emit(record.EvLeftBehind, map[string]any{"repo": repo, "error": err.Error()})
	}
	return terr
}

// finish removes the worktrees (their branches stay) and tmp/, writes the
// final record and event, and seals the attempt's events.
func (a *attemptRun) finish() *record.AttemptRecord {
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		if repo := a.repos[w.Repo]; repo != nil {
			if err := repo.RemoveWorktree(a.wts[w.Repo]); err != nil {
				a.events.Emit("worktree.remove_failed", map[string]any{"repo": w.Repo, "error": err.Error()})
			} else {
				w.Removed = true
			}
		} else if _, err := os.Stat(w.Path); err == nil {
			_ = removeWorktree(w)
		}
	}
	_ = os.RemoveAll(filepath.Join(a.dir, record.TmpDir))
	_ = os.RemoveAll(filepath.Join(a.dir, candidatesDir)) // a judge's exports
	// The step's private refs: its branch was taken (or refused) at commit.
	_ = os.RemoveAll(filepath.Join(a.dir, record.RefStoreDir))
	if !a.keepObjects {
		// Imported (what the branches need is in the repositories now) or
		// never committed: the rest is unreferenced.
		_ = os.RemoveAll(filepath.Join(a.dir, record.ObjectsDir))
	}
	_ = os.Remove(filepath.Join(a.dir, record.WorktreesDir))
	if o := a.egressObs(); o != nil {
		o.close()
	}
	if a.rec.Outcome == "" {
		a.setOutcome(status.OutcomeFailed, status.ReasonInternal, "the attempt ended without an outcome")
	}
	a.rec.Finished = ptrTime(time.Now().UTC())
	a.save()
	data := map[string]any{"outcome": a.rec.Outcome, "duration_ms": a.rec.Finished.Sub(a.rec.Started).Milliseconds()}
	if a.rec.Reason != status.ReasonNone {
		data["reason"], data["message"], data["fix"] = a.rec.Reason, a.rec.Message, a.rec.Fix
	}
	if a.rec.ExitCode != nil {
		data["exit_code"] = *a.rec.ExitCode
	}
	a.events.Emit(record.EvAttemptFinished, data)
	_ = a.events.Close()
	return a.rec
}

// guardRefs snapshots, per repo, the branches beside the attempt's own.
func (a *attemptRun) guardRefs() {
	a.refGuards = map[string]*worktree.RefGuard{}
	for repo, wt := range a.wts {
		g, err := wt.GuardSiblingRefs()
		if err != nil {
			a.events.Emit(record.EvRefsRestored, map[string]any{"repo": repo, "error": err.Error()})
			continue
		}
		g.Leave(a.opt.siblings...)
		a.refGuards[repo] = g
	}
}

// restoreRefs puts back the other attempts' branches a step moved, added
// or removed; it records what it repaired, since a step that tried is
// worth knowing about.
func (a *attemptRun) restoreRefs() {
	for repo, g := range a.refGuards {
		repaired, found, err := g.Restore()
		for _, f := range found {
			a.events.Emit(record.EvLeftBehind, map[string]any{"repo": repo, "path": f.Path, "kind": f.Kind, "action": f.Action})
		}
		if err != nil {
			a.events.Emit(record.EvRefsRestored, map[string]any{"repo": repo, "branches": repaired, "error": err.Error()})
			continue
		}
		if len(repaired) > 0 {
			a.events.Emit(record.EvRefsRestored, map[string]any{"repo": repo, "branches": repaired})
		}
	}
}

// limitsData is the limits for a process.started event.
func limitsData(l proc.Limits) map[string]any {
	return map[string]any{"pids": l.Pids, "memory": l.Memory, "cpu": l.CPU, "disk": l.Disk, "output": l.Output}
}
