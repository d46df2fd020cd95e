package attempt

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

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/internal/rmtree"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
	"github.com/kusaw/kusaw/worktree"
)

// ParamEnvPrefix names a run's parameters in its steps' environment.
const ParamEnvPrefix = "KUSAW_PARAM_"

// Attempt is one attempt while it executes.
type Attempt struct {
	h      *Host
	job    Job
	f      *config.Factory // the attempt's view: the one-step factory of its spec
	spec   *record.AttemptSpec
	step   *config.Step
	n      int
	dir    string
	rec    *record.AttemptRecord
	events *Sink
	redact *Redactor
	wts    map[string]*worktree.Worktree
	repos  map[string]*worktree.Repo
	// ended: the attempt has its outcome before any phase ran (Open
	// could not make its folder).
	ended bool

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
	// layerFailed: repo → why its write layer could not be applied (its
	// tree is then not the step's work: no commit of it).
	layerFailed map[string]string
	// extras: what worktree set-up gave the attempt (included files,
	// cache locks, leased ports).
	extras attemptExtras
	// limits watches the step's limits while the processes run.
	limits *limitWatch
	// unwarm stops proc.Prewarm once the process is placed.
	unwarm func()
	// end is what the phases found; decide turns it into the outcome.
	end ending
	// stop ends the attempt's processes (a record could not be written).
	stop context.CancelCauseFunc
}

// Run is the local executor: it runs the attempt of spec on this machine
// and returns its finished record (docs/architecture.md, "The life of an
// attempt"). serve's engine and a cluster worker both run attempts so.
func Run(ctx context.Context, h *Host, spec *record.AttemptSpec, job Job) *record.AttemptRecord {
	a := Open(h, spec, job)
	if a.ended {
		return a.Finish()
	}
	return a.Execute(ctx)
}

// Local is the local executor as a value (factory's Executor).
type Local struct{}

// Run runs the opened attempt here.
func (Local) Run(ctx context.Context, a *Attempt) *record.AttemptRecord { return a.Execute(ctx) }

// newAttempt is the running form of the attempt of spec, in the one-step
// factory f the spec describes.
func newAttempt(h *Host, spec *record.AttemptSpec, job Job) *Attempt {
	f, s := spec.Factory(h.StateDir, h.Repos)
	a := &Attempt{h: h, job: job, f: f, spec: spec, step: s, n: spec.Number, dir: job.Dir, redact: job.Redact,
		wts: map[string]*worktree.Worktree{}, repos: map[string]*worktree.Repo{}}
	if a.redact == nil {
		a.redact = &Redactor{}
	}
	a.rec = &record.AttemptRecord{Run: spec.Run, Step: s.ID, Number: spec.Number, Of: spec.Of, Kind: s.Kind(), Builtin: s.Builtin,
		Setup: f.Setup, Started: time.Now().UTC(), Worktrees: []record.WorktreeRecord{}, Processes: []record.ProcessRecord{}, Role: job.Shape.Role}
	if s.Kind() == config.KindAgent {
		a.rec.Provider = s.Provider
	}
	if s.Timeout > 0 {
		a.rec.Timeout = s.Timeout.String()
	}
	return a
}

// Open begins the attempt of spec: its folder, its sealed events (the
// first, attempt.started) and the spec beside them. What runs it next is
// an executor: Execute here, or the cluster's dispatch.
func Open(h *Host, spec *record.AttemptSpec, job Job) *Attempt {
	a := newAttempt(h, spec, job)
	a.rec.Mode, a.rec.ModeOrigin, a.rec.Network = spec.Mode, spec.ModeOrigin, spec.Network
	for _, sub := range []string{record.ArtifactsDir, record.TmpDir, record.WorktreesDir} {
		perm := os.FileMode(record.DirMode())
		if sub == record.TmpDir {
			perm = 0o700
		}
		if err := os.MkdirAll(filepath.Join(a.dir, sub), perm); err != nil {
			a.events = &Sink{run: spec.Run, step: a.step.ID, attempt: a.n, emit: h.OnEvent}
			a.endEarly(Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonInternal, Message: "cannot create the attempt folder: " + err.Error()})
			a.ended = true
			return a
		}
	}
	a.events = a.openSink()
	started := map[string]any{"attempt": a.n, "of": spec.Of, "kind": a.step.Kind(), "mode": a.rec.Mode, "mode_origin": a.rec.ModeOrigin, "network": a.rec.Network}
	if a.rec.Role != nil {
		// The sealed events say what a helper's attempt was for too.
		started["role"] = a.rec.Role
	}
	a.events.Emit(record.EvAttemptStarted, started)
	if b, err := spec.Marshal(); err == nil {
		_ = os.WriteFile(filepath.Join(a.dir, record.SpecFile), b, record.FileMode())
	}
	return a
}

// Refuse records an attempt that cannot start (its spec could not be
// made: err says why) and returns its finished record. spec need only
// name the attempt, its step and its setup.
func Refuse(h *Host, spec *record.AttemptSpec, job Job, err error) *record.AttemptRecord {
	a := newAttempt(h, spec, job)
	if merr := os.MkdirAll(a.dir, record.DirMode()); merr == nil {
		a.events = a.openSink()
	} else {
		a.events = &Sink{run: spec.Run, step: a.step.ID, attempt: a.n, emit: h.OnEvent}
	}
	a.endEarly(Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonStepStartFailed, Message: err.Error()})
	return a.Finish()
}

// Reopen takes up an attempt another executor began (serve restarted
// while it ran on a worker): its record as saved, its events continued.
// A nil rec starts a fresh record in the same folder.
func Reopen(h *Host, spec *record.AttemptSpec, job Job, rec *record.AttemptRecord) *Attempt {
	a := newAttempt(h, spec, job)
	if rec != nil {
		if rec.Worktrees == nil {
			rec.Worktrees = []record.WorktreeRecord{}
		}
		if rec.Processes == nil {
			rec.Processes = []record.ProcessRecord{}
		}
		a.rec = rec
	}
	path := filepath.Join(a.dir, record.EventsFile)
	a.events = ContinueSink(path, h.Key, LogOptions(spec.Run, a.step.ID, a.n, chainlog.KindEvents), h.OnEvent, a.redact)
	a.events.onErr = func(err error) { a.writeFailed(path, err) }
	if err := a.events.Err(); err != nil {
		a.writeFailed(path, err)
	}
	return a
}

// Execute runs the opened attempt's phases on this machine and finishes
// it. Each phase either prepares the next or ends the attempt with its
// reason: prestart (worktrees, merges, candidates, included files, setup,
// ref guards, caches and ports), the processes, then the commit and the
// finish, which always run (Nomad's task-runner hooks: prestart, exited,
// poststop, stop).
func (a *Attempt) Execute(ctx context.Context) *record.AttemptRecord {
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
	// A record that cannot be written stops the processes (writeFailed).
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	a.mu.Lock()
	a.stop = stop
	a.mu.Unlock()
	for _, p := range a.prestart() {
		if a.writeFailure() {
			return a.Finish()
		}
		if err := p.run(ctx); err != nil {
			if p.canceled != "" && ctx.Err() != nil {
				a.endEarly(Verdict{Outcome: status.OutcomeCanceled, Reason: status.ReasonStepCanceled, Message: p.canceled})
			} else {
				a.endEarly(Verdict{Outcome: status.OutcomeFailed, Reason: p.reason, Message: err.Error()})
			}
			return a.Finish()
		}
	}
	procs := make([][]string, len(a.spec.Processes))
	for i, p := range a.spec.Processes {
		procs[i] = p.Repos
	}
	a.runProcesses(ctx, procs)
	a.applyLayers()
	a.decide()
	a.releaseResources()
	a.commit()
	return a.Finish()
}

// phase is one step of an attempt before its processes start.
type phase struct {
	name     string
	run      func(context.Context) error
	reason   status.Reason // what its failure is
	canceled string        // what a cancel during it is called ("": its error stands)
}

// prestart lists the phases before the processes, in order: each needs
// what the one before made.
func (a *Attempt) prestart() []phase {
	plain := func(f func() error) func(context.Context) error { return func(context.Context) error { return f() } }
	return []phase{
		{name: "worktrees", run: plain(a.createWorktrees), reason: status.ReasonWorktreeFailed},
		{name: "merges", run: plain(a.startMerges), reason: status.ReasonWorktreeFailed},
		{name: "candidates", run: plain(a.exportCandidates), reason: status.ReasonWorktreeFailed},
		{name: "include", run: plain(a.includeFiles), reason: status.ReasonSetupFailed},
		{name: "setup", run: a.setup, reason: status.ReasonSetupFailed, canceled: "canceled during setup"},
		{name: "ref guards", run: func(context.Context) error { a.guardRefs(); return nil }},
		{name: "caches and ports", run: a.holdResources, reason: status.ReasonSetupFailed, canceled: "canceled while waiting for a cache"},
	}
}

// save writes attempt.json atomically. Process goroutines change their
// own entries under mu.
func (a *Attempt) save() {
	path := filepath.Join(a.dir, record.AttemptFile)
	a.mu.Lock()
	var err error
	if a.job.Volatile {
		err = writeJSONVolatile(path, a.rec)
	} else {
		err = writeJSON(path, a.rec)
	}
	a.mu.Unlock()
	if err != nil {
		a.writeFailed(path, err)
	}
}

// The attempt as another executor (the cluster's dispatch) records it.

// Spec is the attempt's spec.
func (a *Attempt) Spec() *record.AttemptSpec { return a.spec }

// Dir is the attempt's folder.
func (a *Attempt) Dir() string { return a.dir }

// Emit writes one event into the attempt's sealed events.
func (a *Attempt) Emit(typ string, data map[string]any) { a.events.Emit(typ, data) }

// Save writes attempt.json.
func (a *Attempt) Save() { a.save() }

// Update changes the record under the attempt's lock.
func (a *Attempt) Update(f func(*record.AttemptRecord)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a.rec)
}

// Record is the attempt's record (read it once the attempt has ended, or
// through Update).
func (a *Attempt) Record() *record.AttemptRecord { return a.rec }

// refusal tells the job of a refused connection.
func (a *Attempt) refusal(d egress.Decision) {
	if a.job.Refusal != nil {
		a.job.Refusal(d)
	}
}

// createWorktrees adds a worktree per active repo on the attempt branch,
// from the run branch. The planned worktrees are recorded first, so a crash
// in the middle leaves enough for recovery to remove them.
func (a *Attempt) createWorktrees() error {
	runID := a.spec.Run
	for _, name := range a.f.ActiveRepos(a.step) {
		rr := a.job.repo(name)
		a.rec.Worktrees = append(a.rec.Worktrees, record.WorktreeRecord{Repo: name, RepoPath: rr.Path,
			Path: filepath.Join(a.dir, record.WorktreesDir, name), Branch: worktree.AttemptBranch(runID, a.step.ID, a.n)})
	}
	a.save()
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		repo, err := a.job.openRepo(w.Repo, w.RepoPath)
		if err != nil {
			return fmt.Errorf("repo %s: %v", w.Repo, err)
		}
		from := a.job.repo(w.Repo).Branch
		if b := a.job.Shape.From[w.Repo]; b != "" {
			from = b
		}
		wt, err := a.addAttempt(repo, w.Repo, from, w.Branch, w.Path)
		if err != nil {
			return fmt.Errorf("repo %s: %v", w.Repo, err)
		}
		a.repos[w.Repo], a.wts[w.Repo] = repo, wt
		w.GitDir, w.BaseSHA, w.Path = wt.GitDir, wt.BaseSHA, wt.Path
		a.events.Emit(record.EvWorktreeCreated, worktreeCreated(w, wt))
	}
	return nil
}

// addAttempt adds the attempt's worktree of repo name from branch from;
// a run branch not made yet (Job.NewBranches) is made first, with the
// attempt's own branch when the attempt starts from it.
func (a *Attempt) addAttempt(repo *worktree.Repo, name, from, branch, path string) (*worktree.Worktree, error) {
	o := worktree.AddOptions{Pool: a.pool(repo), Sparse: a.sparse(name)}
	if !a.job.NewBranches {
		return repo.AddAttemptWith(from, branch, path, o)
	}
	rr := a.job.repo(name)
	if from == rr.Branch {
		o.NewRunBase = rr.HeadSHA
		return repo.AddAttemptWith(from, branch, path, o)
	}
	if err := repo.SetBranch(rr.Branch, "", rr.HeadSHA); err != nil {
		return nil, err
	}
	return repo.AddAttemptWith(from, branch, path, o)
}

// sparse are the folders repo name's worktree checks out (the spec's,
// wherever the attempt runs); nil: the whole tree.
func (a *Attempt) sparse(name string) []string {
	for _, sr := range a.spec.Repos {
		if sr.Name == name {
			return sr.Sparse
		}
	}
	return nil
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
func (a *Attempt) setup(ctx context.Context) error {
	if len(a.f.Setup) == 0 {
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
	f, err := os.OpenFile(filepath.Join(a.dir, record.SetupLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, record.FileMode())
	if err != nil {
		return err
	}
	defer f.Close()
	logf := &guardedWriter{a: a, path: f.Name(), w: f}
	for _, w := range host {
		env := steps.HostEnv(os.Environ(), steps.TempEnv(filepath.Join(a.dir, record.TmpDir)), map[string]string{
			steps.EnvRun: a.spec.Run, steps.EnvStep: a.step.ID, steps.EnvAttempt: fmt.Sprint(a.n),
			steps.EnvArtifacts: filepath.Join(a.dir, record.ArtifactsDir), steps.EnvWorktreePrefix + steps.EnvName(w.Repo): w.Path,
		})
		for _, argv := range a.f.Setup {
			fmt.Fprintf(logf, "== %s: %s\n", w.Repo, strings.Join(argv, " "))
			start := time.Now()
			res := a.h.runProcess(ctx, 0, &exec.Cmd{Path: lookPath(argv[0]), Args: argv, Dir: w.Path, Env: env}, logf, logf, nil, nil)
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
func (a *Attempt) setupPlace(w record.WorktreeRecord) (string, string) {
	rr := a.job.repo(w.Repo)
	if rr != nil && w.BaseSHA == rr.BaseSHA && a.job.Shape.Merge[w.Repo] == "" {
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
func (a *Attempt) withSetup(argv, repos []string) []string {
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
func (a *Attempt) setupFailed() (string, bool) {
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
func (a *Attempt) runProcesses(ctx context.Context, procs [][]string) {
	actx := ctx
	var cancel context.CancelFunc
	if a.step.Timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, a.step.Timeout)
		defer cancel()
	}
	// A crossed step limit stops every process of the attempt.
	lctx, lstop := context.WithCancelCause(actx)
	defer lstop(nil)
	a.limits = newLimitWatch(a.step.Limits, lstop, func(le *LimitError) { a.events.Emit(record.EvLimitReached, le.Data()) })
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
				a.endEarly(Verdict{Outcome: status.OutcomeRefused, Reason: se.Reason, Message: se.Msg, Fix: se.Fix})
				if record.IsSandboxReason(se.Reason) && a.job.Refused != nil {
					a.job.Refused(se)
				}
			} else {
				a.endEarly(Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonStepStartFailed, Message: err.Error()})
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

	// Each process's outcome, then the attempt's (decide.go).
	ends := make([]procEnd, len(results))
	verdicts := make([]Verdict, len(results))
	for i, res := range results {
		ends[i] = a.procEnd(res, ctx, actx)
		verdicts[i] = decideProcess(ends[i])
		pr := &a.rec.Processes[i]
		pr.Outcome, pr.Reason, pr.Message = verdicts[i].Outcome, verdicts[i].Reason, verdicts[i].Message
	}
	v, exit := decideProcesses(ends, verdicts)
	a.mu.Lock()
	a.end.procs = &v
	a.rec.ExitCode = exit
	a.mu.Unlock()
	for _, res := range results {
		if res.parsed.usage != nil {
			if a.rec.Usage == nil {
				a.rec.Usage = &record.Usage{}
			}
			a.rec.Usage.Merge(res.parsed.usage)
		}
	}
}

// procEnd gathers what is known of how process res ended, for
// decideProcess: ctx is the attempt's, actx the step's timeout within it.
func (a *Attempt) procEnd(res procResult, ctx, actx context.Context) procEnd {
	p := procEnd{stopped: res.stopped, canceled: ctx.Err() != nil, timedOut: actx.Err() != nil, timeout: a.step.Timeout,
		limit: res.limit, limitValue: res.limitValue, hasExit: res.hasExit, exit: res.exit}
	if res.startErr != nil {
		p.startErr = res.startErr.Error()
	}
	if le := a.limits.reached(); le != nil {
		p.stepLimit = le.Error()
	}
	if res.stopped && errors.Is(res.cause, errAfterResult) {
		p.afterResult = true
		p.result.Outcome, p.result.Reason, p.result.Message = res.parsed.outcome(0)
	}
	if !p.stopped && p.startErr == "" {
		p.ended.Outcome, p.ended.Reason, p.ended.Message = res.classify()
		p.setupFailed, _ = a.setupFailed()
		if o := a.egressObs(); o != nil {
			p.budget = o.budgetHit()
			p.untrusted = o.untrustedUpstream()
		}
	}
	return p
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
	// loginSessionDirs are the login folder's session folders
	// continue_session carries to the run's next attempt.
	loginSessionDirs []string
	// credentialRules are how the agent CLI's refresh changes its
	// credentials files (the provider's), for the sandbox's carry-back.
	credentialRules []sandbox.CredentialRule
	// readPaths must be readable in the sandbox (the agent CLI's install).
	readPaths []string
	// agent: an agent step's process, whose argv's commandWords are the
	// only words that may name a file for the sandbox to show.
	agent        bool
	commandWords []string
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
func (a *Attempt) prepare(i int, repos []string, many bool) (*preparedProc, error) {
	var wts []steps.Worktree
	for _, w := range a.rec.Worktrees {
		wts = append(wts, steps.Worktree{Repo: w.Repo, Path: w.Path, BaseSHA: a.job.repo(w.Repo).BaseSHA})
	}
	at := steps.Attempt{Run: a.spec.Run, Step: a.step, Number: a.n, Repos: repos, Worktrees: wts,
		Artifacts: filepath.Join(a.dir, record.ArtifactsDir), Tmp: filepath.Join(a.dir, record.TmpDir), Kusaw: a.h.Kusaw}
	spec, err := steps.Build(at)
	if err != nil {
		return nil, err
	}
	p := &preparedProc{stdout: record.StdoutFile, stderr: record.StderrFile}
	if many {
		p.stdout, p.stderr = "stdout-"+repos[0]+".log", "stderr-"+repos[0]+".log"
	}
	// The mode and network are the spec's: decided once, where it was made.
	sp := a.spec.Processes[i]
	m := sp.Mode
	if spec.Kind == config.KindAgent {
		if err := a.agentSpec(spec, at, p, sp); err != nil {
			return nil, err
		}
	}
	pr := &a.rec.Processes[i]
	// The record shows a value filled in at start as ${NAME}, never the
	// value (the inject endpoint carries the lease's token).
	pr.Repos, pr.Dir, pr.Argv, pr.Stdout, pr.Stderr = repos, spec.Dir, providers.DisplayArgv(spec.Argv), p.stdout, p.stderr
	pr.Probe = p.probe
	pr.Env = map[string]string{}
	for k, v := range spec.Env {
		pr.Env[k] = v
	}
	for k := range spec.Secrets {
		pr.Env[k] = SecretRedacted
	}
	// Secrets are resolved only now, just before the start, and go only to
	// the process's environment and the redactor.
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	for k, v := range a.spec.Params {
		env[ParamEnvPrefix+k], pr.Env[ParamEnvPrefix+k] = v, v
	}
	for k, v := range a.job.Shape.Env {
		env[k], pr.Env[k] = v, v
	}
	p.readPaths = append(p.readPaths, a.job.Shape.ReadOnly...)
	a.resourceEnv(env)
	a.resourceEnv(pr.Env)
	if len(spec.Secrets) > 0 {
		src, err := a.h.secrets()
		if err != nil {
			return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: "cannot open the secret store: " + err.Error(), Fix: status.SecretStoreFix}
		}
		for name, key := range spec.Secrets {
			v, err := src.Get(key)
			if err != nil {
				return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: fmt.Sprintf("env %s: secret %s is not in the secret store", name, key),
					Fix: "kusaw config set " + key + " --secret"}
			}
			a.redact.Add(v)
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
	argv, err := expandArgv(spec.Argv, nil, env)
	if err != nil {
		return nil, err
	}
	// PWD is the step's folder, not kusaw's: a program that trusts PWD
	// over getcwd (opencode does) would work in kusaw's folder instead.
	cmd := &exec.Cmd{Path: lookPath(argv[0]), Args: argv, Dir: spec.Dir,
		Env: steps.HostEnv(os.Environ(), steps.TempEnv(at.Tmp), map[string]string{"PWD": spec.Dir}, env)}
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
func (a *Attempt) execute(ctx context.Context, i int, p *preparedProc) procResult {
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
	var stdout io.Writer = &guardedWriter{a: a, path: outf.Name(), w: outf}
	var stderr io.Writer = &guardedWriter{a: a, path: errf.Name(), w: errf}
	// kusaw sandbox exec streams the process's output to the terminal too.
	if a.job.Stdout != nil {
		stdout = io.MultiWriter(stdout, a.job.Stdout)
	}
	if a.job.Stderr != nil {
		stderr = io.MultiWriter(stderr, a.job.Stderr)
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
		if p.lease != nil {
			// The hand-over waits for this: only the bridge below this
			// process (the attempt's own bwrap) may hand over.
			p.lease.ExpectPeer(pid)
		}
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
	res := a.h.runLimited(pctx, a.h.KillGrace, p.cmd, stdout, stderr, started, a.redact, lim)
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
func (h *Host) runProcess(ctx context.Context, grace time.Duration, cmd *exec.Cmd, stdout, stderr io.Writer, started func(int), red *Redactor) procResult {
	return h.runLimited(ctx, grace, cmd, stdout, stderr, started, red, proc.Limits{})
}

// runLimited is runProcess under resource limits (sandbox.resources).
func (h *Host) runLimited(ctx context.Context, grace time.Duration, cmd *exec.Cmd, stdout, stderr io.Writer, started func(int), red *Redactor, lim proc.Limits) procResult {
	if grace <= 0 {
		grace = h.KillGrace
	}
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	r := proc.Run(ctx, cmd, proc.Options{Grace: grace, Stdout: stdout, Stderr: stderr, Started: started, Copy: red.CopyRedacted, Limits: lim})
	res := procResult{startErr: r.StartErr, hasExit: r.HasExit, exit: r.Exit, signal: r.Signal, dur: r.Dur, stopped: r.Stopped, limit: r.Limit}
	if r.Limit != "" {
		res.limitValue = lim.Value(r.Limit)
	}
	return res
}

// resources are the limits of the attempt's processes: the step's
// sandbox.resources over the factory's, kusaw's defaults for the rest;
// disk counts the attempt's tmp folder and worktrees.
func (a *Attempt) resources() proc.Limits {
	r := a.f.EffectiveResources(a.step)
	l := proc.Defaults(proc.Limits{Pids: r.Pids, Memory: r.Memory, CPU: r.CPU, Disk: r.Disk, Output: r.Output})
	l.DiskPaths = []string{filepath.Join(a.dir, record.TmpDir), filepath.Join(a.dir, record.WorktreesDir)}
	return l
}

// commit commits each worktree's changes on the attempt branch (whatever the
// outcome: failed attempts keep their branch) and, when the attempt passed,
// advances the run branch to it.
func (a *Attempt) commit() {
	if len(a.wts) == 0 {
		return
	}
	a.restoreRefs()
	a.dropIncluded()
	msg := fmt.Sprintf("kusaw: run %s, step %s, attempt %d (%s)", a.spec.Run, a.step.ID, a.n, a.rec.Outcome)
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		wt := a.wts[w.Repo]
		if wt == nil {
			continue
		}
		if why := a.layerFailed[w.Repo]; why != "" {
			a.events.Emit(record.EvCommitted, map[string]any{"repo": w.Repo, "error": why})
			a.CommitFailed(why)
			continue
		}
		if err := a.takeStepRefs(w.Repo, wt); err != nil {
			a.events.Emit(record.EvCommitted, map[string]any{"repo": w.Repo, "error": err.Error()})
			a.CommitFailed(err.Error())
		}
		sha, changed, err := wt.CommitAll(msg)
		if err != nil {
			a.events.Emit(record.EvCommitted, map[string]any{"repo": w.Repo, "error": err.Error()})
			a.CommitFailed(err.Error())
			continue
		}
		w.HeadSHA, w.Changed = sha, changed
		a.events.Emit(record.EvCommitted, map[string]any{"repo": w.Repo, "branch": w.Branch, "sha": sha, "changed": changed})
	}
	if a.rec.Outcome != status.OutcomePassed || a.job.Shape.Keep || a.job.RunBranchElsewhere {
		return
	}
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		rr := a.job.repo(w.Repo)
		if w.HeadSHA == "" || w.HeadSHA == rr.HeadSHA {
			continue
		}
		if err := a.repos[w.Repo].AdvanceBranch(rr.Branch, w.HeadSHA); err != nil {
			a.CommitFailed(err.Error())
			return
		}
		rr.HeadSHA = w.HeadSHA
		if a.job.Advanced != nil {
			a.job.Advanced(w.Repo, w.HeadSHA)
		}
		a.events.Emit(record.EvBranchAdvanced, map[string]any{"repo": w.Repo, "branch": rr.Branch, "sha": w.HeadSHA})
	}
}

// takeStepRefs makes what the step left in its git folders safe for
// kusaw's own git, then takes the step's commits: from the private ref
// store when it had one, else from the branch's own folder, checked. The
// objects those commits need are verified into the repository first, or
// the branch stays at (goes back to) its base; the files are committed
// either way.
func (a *Attempt) takeStepRefs(repo string, wt *worktree.Worktree) error {
	found, err := worktree.Scrub(wt.GitDir)
	var more []worktree.Finding
	var terr error
	od := a.objectDir(repo)
	if od != "" {
		f, oerr := worktree.ScrubObjects(od)
		found, err = append(found, f...), errors.Join(err, oerr)
	}
	// A write layer's nested .git entries were never applied: no walk.
	if !wt.Layered() {
		if f, nerr := worktree.ScrubNested(wt.Path); len(f) > 0 || nerr != nil {
			found, err = append(found, f...), errors.Join(err, nerr)
		}
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

// Finish removes the worktrees (their branches stay) and tmp/, writes the
// final record and event, and seals the attempt's events.
func (a *Attempt) Finish() *record.AttemptRecord {
	for i := range a.rec.Worktrees {
		w := &a.rec.Worktrees[i]
		if repo := a.repos[w.Repo]; repo != nil {
			if a.releaseWorktree(repo, w) {
				continue
			}
			if err := repo.RemoveWorktree(a.wts[w.Repo]); err != nil {
				a.events.Emit(record.EvWorktreeRemoveFailed, map[string]any{"repo": w.Repo, "error": err.Error()})
			} else {
				w.Removed = true
			}
		} else if _, err := os.Stat(w.Path); err == nil {
			_ = RemoveWorktree(w)
		}
	}
	if a.job.Shape.KeepSession && a.step != nil && a.step.Kind() == config.KindAgent {
		// continue_session: the agent's session files outlive tmp/, in
		// the attempt's own folder, for the run's next attempt.
		_ = providers.KeepSession(a.step.Provider, filepath.Join(a.dir, record.TmpDir, ProviderConfigDir), filepath.Join(a.dir, SessionDir))
	}
	// A step may have locked folders of its own in these (chmod 000):
	// they go all the same, login copies and tokens with them.
	_ = rmtree.RemoveAll(filepath.Join(a.dir, record.TmpDir))
	_ = rmtree.RemoveAll(filepath.Join(a.dir, candidatesDir)) // a judge's exports
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
	a.decide()
	a.rec.Finished = ptrTime(time.Now().UTC())
	a.save()
	a.decide() // a failed save fails the attempt: its final event says so
	data := map[string]any{"outcome": a.rec.Outcome, "duration_ms": a.rec.Finished.Sub(a.rec.Started).Milliseconds()}
	if a.rec.Reason != status.ReasonNone {
		data["reason"], data["message"], data["fix"] = a.rec.Reason, a.rec.Message, a.rec.Fix
	}
	if a.rec.ExitCode != nil {
		data["exit_code"] = *a.rec.ExitCode
	}
	a.events.Emit(record.EvAttemptFinished, data)
	if err := a.events.Close(); err != nil {
		// The events could not all be written or sealed: attempt.json
		// says so (what was sealed before still verifies).
		a.writeFailed(filepath.Join(a.dir, record.EventsFile), err)
		a.decide()
		a.save()
	}
	return a.rec
}

// errWriteFailed stops an attempt's processes when one of its records
// cannot be written.
var errWriteFailed = errors.New("a record of the attempt could not be written")

// writeFailed ends the attempt because path (one of its records: output,
// events, attempt.json, egress.log) could not be written: its processes
// are stopped at once rather than left blocked on a full disk, and the
// outcome names the folder and the fix. The first failure is the one
// named.
func (a *Attempt) writeFailed(path string, err error) {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is named once
	}
	a.mu.Lock()
	first := a.end.write == nil
	if first {
		a.end.write = &Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonStateWriteFailed,
			Message: fmt.Sprintf("cannot write %s: %v", path, err),
			Fix: fmt.Sprintf("free space on the file system that holds %s (df -h %s) or raise its quota, then run the step again; what kusaw sealed before the failure still verifies (kusaw log verify)",
				a.h.StateDir, a.h.StateDir)}
	}
	stop := a.stop
	a.mu.Unlock()
	if first && stop != nil {
		stop(errWriteFailed)
	}
}

// writeFailure reports whether a record could not be written.
func (a *Attempt) writeFailure() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.end.write != nil
}

// guardedWriter is one of the attempt's output files: a write that fails
// ends the attempt (writeFailed), and what the process prints after it is
// drained and dropped, so the process is never left blocked on its pipe.
type guardedWriter struct {
	a      *Attempt
	path   string
	w      io.Writer
	mu     sync.Mutex
	failed bool
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed {
		return len(p), nil
	}
	if _, err := g.w.Write(p); err != nil {
		g.failed = true
		g.a.writeFailed(g.path, err)
	}
	return len(p), nil
}

// guardRefs snapshots, per repo, the branches beside the attempt's own.
func (a *Attempt) guardRefs() {
	a.refGuards = map[string]*worktree.RefGuard{}
	for repo, wt := range a.wts {
		g, err := wt.GuardSiblingRefs()
		if err != nil {
			a.events.Emit(record.EvRefsRestored, map[string]any{"repo": repo, "error": err.Error()})
			continue
		}
		g.Leave(a.job.Shape.Siblings...)
		a.refGuards[repo] = g
	}
}

// restoreRefs puts back the other attempts' branches a step moved, added
// or removed; it records what it repaired, since a step that tried is
// worth knowing about.
func (a *Attempt) restoreRefs() {
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
