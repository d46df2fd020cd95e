package factory

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/worktree"
)

// SecretSource resolves secret references when a step's process starts.
type SecretSource interface {
	Get(key string) (string, error)
}

// Options configure an Engine.
type Options struct {
	// Kusaw is the kusaw binary built-in steps run as (`kusaw __builtin
	// NAME`). Default: os.Executable().
	Kusaw string
	// KillGrace is how long a process has between SIGTERM and SIGKILL when
	// it times out or its run is canceled. Default 10s.
	KillGrace time.Duration
	// Hide are more paths every sandbox hides (a worker's identity).
	Hide []string
	// Remote, when set, runs the attempts of the pools it takes on other
	// machines (serve's cluster).
	Remote Remote
	// OnEvent is called for every event of every run, after it is written.
	// It must not block for long.
	OnEvent func(record.Event)
	// Secrets resolves {secret: KEY} env values. Default: the user's
	// secret store, opened on first use.
	Secrets SecretSource
	// Key signs the seals of events and egress logs. Default: the
	// factory's key in the secret-store folder, created on first use.
	Key ed25519.PrivateKey
	// Proxy is a shared egress proxy (serve runs one for all runs). Nil:
	// the engine starts its own on first use; Close stops it.
	Proxy *egress.Proxy
	// InjectRootCAs verifies inject upstreams; nil uses the system's
	// roots (tests and private gateways set it).
	InjectRootCAs *x509.CertPool
	// SandboxCheck replaces sandbox.Check (tests: an unavailable backend).
	SandboxCheck func() sandbox.CheckResult
	// CancelPoll is how often a running run looks for a cancel request
	// (kusaw cancel). Default 100ms.
	CancelPoll time.Duration
	// Slots bound the attempts running here at once across runs
	// (serve's max_parallel); nil: no bound. RemoteSlots bound those on
	// workers (serve.cluster.max_running; nil: only the workers' own
	// slots do).
	Slots, RemoteSlots *Slots
	// RunLink is a run's link in notifications (serve: its web page);
	// nil: the run's folder as a file:// URL.
	RunLink func(runID string) string
	// NotifyFor is how long a notification is retried (default 10m);
	// NotifyBackoff its first wait between tries (default 1s, doubling up
	// to a minute).
	NotifyFor, NotifyBackoff time.Duration
}

// DefaultKillGrace is the time between SIGTERM and SIGKILL.
const DefaultKillGrace = attempt.DefaultKillGrace

// Engine executes pipelines of one factory. It is safe for concurrent use:
// serve runs several runs on one engine.
type Engine struct {
	F     *config.Factory
	State *State
	opts  Options

	sbCheck     sandboxCheck
	hostOnce    sync.Once
	hostVal     *attempt.Host
	proxyMu     sync.Mutex
	ownProxy    *egress.Proxy
	secretsOnce sync.Once
	secrets     SecretSource
	secretsErr  error

	notifyWG sync.WaitGroup  // deliveries in flight (notify.go)
	closing  context.Context // ends notification retries
	// StopNotifications gives up the retries of webhooks (serve stopping).
	StopNotifications context.CancelFunc
}

// New opens the factory's state directory (recovering abandoned runs) and
// returns an engine.
func New(f *config.Factory, opts Options) (*Engine, error) {
	record.SetStateDirMode(f.StateDirMode)
	st, err := OpenState(f.StateDir)
	if st == nil {
		return nil, err
	}
	// A kusaw killed with -9 left its attempts' cgroups, and whatever
	// runs in them (also processes that left the step's process group).
	proc.ReapStaleGroups()
	if opts.Kusaw == "" {
		exe, xerr := os.Executable()
		if xerr != nil {
			return nil, fmt.Errorf("cannot find the kusaw binary for built-in steps: %v", xerr)
		}
		opts.Kusaw = exe
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	if opts.CancelPoll <= 0 {
		opts.CancelPoll = 100 * time.Millisecond
	}
	if opts.Key == nil {
		dir, kerr := secretstore.Dir()
		if kerr == nil {
			opts.Key, kerr = chainlog.LoadOrCreateKey(dir)
		}
		if kerr != nil {
			return nil, fmt.Errorf("cannot load the log-signing key: %v", kerr)
		}
	}
	e := &Engine{F: f, State: st, opts: opts}
	e.closing, e.StopNotifications = context.WithCancel(context.Background())
	if opts.Secrets != nil {
		e.secretsOnce.Do(func() { e.secrets = opts.Secrets })
	}
	// A recovery error (a worktree git refused to remove) must not stop new
	// runs; it is returned with a usable engine.
	return e, err
}

// Run is one execution of a pipeline.
type Run struct {
	Record *record.RunRecord
	Dir    string

	e       *Engine
	steps   []*config.Step
	lock    *RunLock
	events  *attempt.Sink
	redact  *attempt.Redactor
	mu      sync.Mutex
	repos   map[string]*worktree.Repo
	refused *status.Error // set when a required attempt was refused: sandbox unavailable
	// exec is what kusaw sandbox exec or doctor asks of the run's attempt.
	exec   execOptions
	resume *resumePoint      // set by Engine.Resume: where a re-queued run continues
	params map[string]string // serve's submitted parameters: KUSAW_PARAM_<NAME> in each step
	// interrupted is set by Interrupt (serve shutting down): the canceled
	// run and attempt are recorded interrupted, not canceled.
	interrupted atomic.Bool
	numbers     map[string]int         // step → its last attempt number (takeAttempt)
	opts        map[string]attemptOpts // attempt id → what the pipeline's shape asks of it
	notes       *notifier              // the run's webhook deliveries (notify.go)
	// limits are the pipeline's (pipelines.<name>.limits), for the run.
	limits *config.Limits
}

// ID is the run's id.
func (r *Run) ID() string { return r.Record.ID }

// Refusal is the sandbox refusal that failed the run, if one did.
func (r *Run) Refusal() *status.Error { return r.refused }

// Pipeline resolves a pipeline name: "" means "default", or the only one.
func (e *Engine) Pipeline(name string) (string, []*config.Step, error) {
	if name == "" {
		if _, ok := e.F.Pipelines["default"]; ok {
			name = "default"
		} else if len(e.F.PipelineOrder) == 1 {
			name = e.F.PipelineOrder[0]
		} else {
			return "", nil, fmt.Errorf("name a pipeline: there is no pipeline called default (pipelines: %v)", e.F.PipelineOrder)
		}
	}
	pl, ok := e.F.Pipelines[name]
	if !ok {
		return "", nil, fmt.Errorf("no pipeline %q in %s (pipelines: %v)", name, e.F.Path, e.F.PipelineOrder)
	}
	var steps []*config.Step
	for _, id := range pl.StepIDs() {
		s := e.F.Steps[id]
		if s == nil {
			return "", nil, fmt.Errorf("pipeline %s names unknown step %q", name, id)
		}
		steps = append(steps, s)
	}
	return name, steps, nil
}

// Prepare creates a queued run of a pipeline: its id, folder, record and
// lock. Execute runs it.
func (e *Engine) Prepare(pipeline string) (*Run, error) {
	return e.prepare(pipeline, nil)
}

func (e *Engine) prepare(pipeline string, init func(*record.RunRecord)) (*Run, error) {
	name, steps, err := e.Pipeline(pipeline)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", record.ErrUnknownPipeline, err)
	}
	return e.prepareSteps(name, steps, init)
}

// prepareSteps creates a queued run of the given steps, recorded under the
// pipeline name given (kusaw sandbox exec uses a step of its own). init,
// when given, completes the record before its first write: no reader ever
// sees the run without what its request said (its trigger, the run it
// continues).
func (e *Engine) prepareSteps(name string, steps []*config.Step, init func(*record.RunRecord)) (*Run, error) {
	var id, dir string
	for i := 0; ; i++ {
		id = NewRunID(time.Now())
		dir = e.State.RunDir(id)
		if err := os.Mkdir(dir, record.DirMode()); err == nil {
			break
		} else if !errors.Is(err, os.ErrExist) || i > 20 {
			return nil, fmt.Errorf("cannot create the run folder %s: %v", dir, err)
		}
	}
	l, ok, err := TryLock(filepath.Join(dir, record.LockFile))
	if err != nil || !ok {
		return nil, fmt.Errorf("cannot lock %s: %v", dir, err)
	}
	host, _ := os.Hostname()
	rec := &record.RunRecord{ID: id, Pipeline: name, Factory: e.F.Path, State: status.RunQueued, Created: time.Now().UTC(),
		Owner: &record.Owner{PID: os.Getpid(), Host: host, Start: processStart}}
	for _, s := range steps {
		rec.Steps = append(rec.Steps, record.StepResult{ID: s.ID})
	}
	if init != nil {
		init(rec)
	}
	r := &Run{Record: rec, Dir: dir, e: e, steps: steps, lock: l, redact: &attempt.Redactor{}, limits: e.pipelineLimits(name)}
	if err := writeJSON(filepath.Join(dir, record.RunFile), rec); err != nil {
		l.Unlock()
		return nil, err
	}
	// The marker tells the next kusaw to check this run's lock.
	if err := os.WriteFile(filepath.Join(e.State.Dir, record.ActiveDir, id), nil, record.FileMode()); err != nil {
		l.Unlock()
		return nil, err
	}
	return r, nil
}

var processStart = time.Now().UTC()

// Run prepares and executes a pipeline. The error is non-nil only when the
// run could not be created; a run that fails is returned with its state.
func (e *Engine) Run(ctx context.Context, pipeline string) (*Run, error) {
	r, err := e.Prepare(pipeline)
	if err != nil {
		return nil, err
	}
	e.Execute(ctx, r)
	return r, nil
}

// errCanceled is the cause of a run's context when it is canceled on
// request (kusaw cancel or the caller's context).
var errCanceled = errors.New("run canceled")

// Execute runs a prepared run to its end. Canceling ctx cancels the run
// (recorded canceled).
func (e *Engine) Execute(ctx context.Context, r *Run) {
	defer r.finish()
	defer e.closeUnadopted(r) // before the run's record is final
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go e.watchCancel(ctx, r, cancel)

	rec := r.Record
	rec.State = status.RunRunning
	rec.Started = ptrTime(time.Now().UTC())
	r.events = e.openRunSink(r)
	started := map[string]any{"pipeline": rec.Pipeline, "steps": stepIDs(r.steps), "factory": e.F.Path}
	r.resumeStarted(started)
	r.events.Emit(record.EvRunStarted, started)

	if r.resume == nil {
		if err := e.createRunBranches(r); err != nil {
			r.end(status.RunFailed, status.ReasonWorktreeFailed, err.Error())
			return
		}
	} else {
		r.save()
		// Branch moves decided before a crash are made, never redone.
		if len(r.Record.Pending) > 0 {
			if err := r.finishMoves(); err != nil {
				r.end(status.RunFailed, status.ReasonCommitFailed, err.Error())
				return
			}
		}
	}
	e.runItems(ctx, r)
}

func stepIDs(steps []*config.Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.ID
	}
	return out
}

// watchCancel turns a cancel file (written by kusaw cancel) into a cancel
// of the run's context.
func (e *Engine) watchCancel(ctx context.Context, r *Run, cancel context.CancelCauseFunc) {
	t := time.NewTicker(e.opts.CancelPoll)
	defer t.Stop()
	p := filepath.Join(r.Dir, record.CancelFile)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := os.Stat(p); err == nil {
				r.events.Emit(record.EvCancelRequested, map[string]any{"by": "kusaw cancel"})
				cancel(errCanceled)
				return
			}
		}
	}
}

// createRunBranches creates kusaw/<run-id> in every repo the pipeline
// uses, from each repo's base.
func (e *Engine) createRunBranches(r *Run) error {
	seen := map[string]bool{}
	bases, err := e.continuedBases(r.Record)
	if err != nil {
		return err
	}
	for _, s := range r.steps {
		for _, name := range e.F.ActiveRepos(s) {
			if seen[name] {
				continue
			}
			seen[name] = true
			cr := e.F.Repos[name]
			repo, err := r.openRepo(name, cr.Path)
			if err != nil {
				return fmt.Errorf("repo %s: %v", name, err)
			}
			dirty, _ := repo.DirtyPaths()
			base := cr.Base
			if b := bases[name]; b != "" {
				base = b // a follow-up starts from the run it continues
			}
			branch, sha, err := createOrReuseRunBranch(repo, r.Record.ID, base)
			if err != nil {
				return fmt.Errorf("repo %s: %v", name, err)
			}
			r.Record.Repos = append(r.Record.Repos, record.RunRepo{Name: name, Path: repo.String(), Base: base, BaseSHA: sha, Branch: branch, HeadSHA: sha, Dirty: dirty})
			if len(dirty) > 0 {
				// The main checkout is never read or written: the run starts
				// from the committed base and leaves these changes alone.
				r.events.Emit(record.EvRepoDirty, map[string]any{"repo": name, "paths": dirty, "note": "uncommitted changes in the main checkout are not part of the run"})
			}
		}
	}
	r.save()
	return nil
}

// openRepo opens a repo once per run (a Repo is safe for concurrent use).
func (r *Run) openRepo(name, path string) (*worktree.Repo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if repo := r.repos[name]; repo != nil {
		return repo, nil
	}
	repo, err := worktree.OpenRepo(path)
	if err != nil {
		return nil, err
	}
	if r.repos == nil {
		r.repos = map[string]*worktree.Repo{}
	}
	r.repos[name] = repo
	return repo, nil
}

// createOrReuseRunBranch creates kusaw/<run-id> at the base. A branch of
// that name still at the base is this run's own, made just before a crash
// kept it out of run.json: a restarted run takes it over. Anything else is
// refused.
func createOrReuseRunBranch(repo *worktree.Repo, runID, base string) (string, string, error) {
	branch := worktree.RunBranch(runID)
	if head, err := repo.Head(branch); err == nil {
		sha, err := repo.ResolveBase(base)
		if err != nil {
			return "", "", err
		}
		if head == sha {
			return branch, sha, nil
		}
	}
	return repo.CreateRunBranch(runID, base)
}

func (r *Run) repo(name string) *record.RunRepo {
	for i := range r.Record.Repos {
		if r.Record.Repos[i].Name == name {
			return &r.Record.Repos[i]
		}
	}
	return nil
}

// save writes run.json atomically.
func (r *Run) save() {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = writeJSON(filepath.Join(r.Dir, record.RunFile), r.Record)
}

func (r *Run) end(st status.RunState, reason status.Reason, msg string) {
	r.endFix(st, reason, msg, "")
}

// endFix ends the run with fix ("": the reason's own, the run's id filled
// in).
func (r *Run) endFix(st status.RunState, reason status.Reason, msg, fix string) {
	if st == status.RunCanceled && r.interrupted.Load() {
		st, reason, msg = status.RunInterrupted, status.ReasonRunInterrupted, "kusaw serve stopped while the run was running"
	}
	rec := r.Record
	rec.State, rec.Reason, rec.Message = st, reason, r.redact.String(msg)
	if reason != status.ReasonNone {
		rec.Fix = fix
		if fix == "" {
			rec.Fix = status.Fill(reason.Info().Fix, map[string]string{"RUN": rec.ID})
		}
	}
	if r.refused != nil {
		rec.Fix = r.refused.Fix
	}
	rec.Finished = ptrTime(time.Now().UTC())
	r.save()
	data := map[string]any{"state": rec.State, "duration_ms": rec.Finished.Sub(*rec.Started).Milliseconds()}
	if reason != status.ReasonNone {
		data["reason"], data["message"], data["fix"] = reason, rec.Message, rec.Fix
	}
	r.events.Emit(record.EvRunFinished, data)
	r.e.notify(r, "run.finished", "")
}

// finish releases the run: closes (seals) its events, drops the active
// marker and the lock.
func (r *Run) finish() {
	if !r.Record.State.Final() {
		r.end(status.RunFailed, status.ReasonInternal, "the run ended without a result")
	}
	r.closeNotes(notifyTimeout + time.Second)
	if r.events != nil {
		if r.events.Close() == nil && r.events.Sealed().Line > 0 {
			seal := r.events.Sealed()
			r.Record.EventsSeal = &seal
			r.save()
		}
	}
	os.Remove(filepath.Join(r.Dir, record.CancelFile))
	os.Remove(filepath.Join(r.e.State.Dir, record.ActiveDir, r.Record.ID))
	r.lock.Unlock()
}

// openSink opens an events file.
func (e *Engine) openSink(path, run, step string, n int, red *attempt.Redactor) *attempt.Sink {
	return attempt.OpenSink(path, e.opts.Key, attempt.LogOptions(run, step, n, chainlog.KindEvents), e.opts.OnEvent, red)
}

// continueSink opens an events file to go on writing it (attempt.ContinueSink).
func (e *Engine) continueSink(path, run, step string, n int, red *attempt.Redactor) *attempt.Sink {
	return attempt.ContinueSink(path, e.opts.Key, attempt.LogOptions(run, step, n, chainlog.KindEvents), e.opts.OnEvent, red)
}

func (e *Engine) secretSource() (SecretSource, error) {
	e.secretsOnce.Do(func() {
		e.secrets, e.secretsErr = openSecretStore()
	})
	return e.secrets, e.secretsErr
}

// PublicKey is the public half of the key that seals this engine's logs.
func (e *Engine) PublicKey() ed25519.PublicKey { return e.opts.Key.Public().(ed25519.PublicKey) }

// pipelineLimits are a pipeline's limits (nil for none, or for a run of
// no pipeline: kusaw sandbox exec).
func (e *Engine) pipelineLimits(name string) *config.Limits {
	if pl := e.F.Pipelines[name]; pl != nil {
		return pl.Limits
	}
	return nil
}
