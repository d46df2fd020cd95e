package serve

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// Files of the state directory that only serve uses.
const (
	serveLockFile = "serve.lock" // flock: one serve per state directory
	maxQueued     = 10000        // a bound on memory, far above real use
)

// ServeOptions configure a Server.
type ServeOptions struct {
	// Engine options; OnEvent is chained after serve's own.
	Engine factory.Options
	// MaxParallel overrides serve.max_parallel (0: the file, else the
	// number of cores).
	MaxParallel int
	// Listen overrides serve.listen (a TCP address; "" keeps the file's).
	Listen string
	// Token is the bearer token TCP clients must send. Required with a TCP
	// listener; the Unix socket needs none (its mode is 0600).
	Token string
	// StopGrace is how long running attempts may go on after a stop
	// request before they are interrupted. Default 30s.
	StopGrace time.Duration
	// Log receives serve's own structured logs.
	Log zerolog.Logger
	// Limits of the API's listeners; zero fields take DefaultLimits.
	Limits Limits
	// Now is serve's clock for schedules and rate limits (tests); nil:
	// time.Now. ScheduleTick is how often schedules are looked at
	// (default 15s).
	Now          func() time.Time
	ScheduleTick time.Duration
	// RetentionEvery is how often retention: is applied besides after
	// each run (default an hour).
	RetentionEvery time.Duration
}

// Server is kusaw serve: a queue of runs executed on one engine, and the
// HTTP API over them.
//
// serve.max_parallel counts attempts: a parallel group or a step's
// candidates run several attempts of one run at once, and every attempt
// takes one of the engine's slots (factory.Slots) for as long as it runs
// (a per_repo attempt's processes are one attempt). Runs are started while
// fewer than max_parallel run, so a queue of single-step runs keeps every
// slot busy while queued runs cost nothing.
type Server struct {
	F    *config.Factory
	E    *factory.Engine
	opts ServeOptions
	log  zerolog.Logger
	max  int
	bus  *bus

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*factory.Run
	running  map[string]*activeRun
	waiting  map[string]bool // running runs that wait at a gate: they hold no slot
	stopping bool
	wg       sync.WaitGroup
	started  time.Time
	tcp      *capListener // the TCP listener, when serve.listen is set
	peak     int          // most runs running at once, for tests and health
	lock     *factory.RunLock
	fileSum  [32]byte      // the factory file serve loaded
	cl       *serveCluster // serve.cluster: the embedded NATS server and the dispatcher
	intake   *intake       // webhooks and schedules (intake.go)
	retain   chan struct{} // a run ended: retention looks again (retention.go)
	state    *stateHealth  // does the state folder take writes (statehealth.go)
}

// ErrFactoryChanged is returned by Submit when the factory file on disk is
// no longer the one serve loaded: a run would silently use the old steps.
var ErrFactoryChanged = errors.New("the factory file changed since kusaw serve started")

func fileSum(p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}

type activeRun struct {
	run    *factory.Run
	cancel context.CancelCauseFunc
}

// NewServer opens the factory's engine, recovering runs a crash left
// running, and, with serve.resume, queues them again from their last
// finished step. It fails if another serve owns the state directory.
func NewServer(f *config.Factory, opts ServeOptions) (*Server, error) {
	if err := os.MkdirAll(f.StateDir, record.DirMode()); err != nil {
		return nil, fmt.Errorf("cannot create the state directory %s: %v", f.StateDir, err)
	}
	l, ok, err := factory.TryLock(filepath.Join(f.StateDir, serveLockFile))
	if err != nil {
		return nil, fmt.Errorf("cannot lock %s: %v", filepath.Join(f.StateDir, serveLockFile), err)
	}
	if !ok {
		return nil, fmt.Errorf("kusaw serve is already running for %s (see: kusaw service status)", f.StateDir)
	}
	s := &Server{F: f, opts: opts, log: opts.Log, running: map[string]*activeRun{}, waiting: map[string]bool{}, started: time.Now().UTC(), lock: l, bus: newBus(), fileSum: fileSum(f.Path)}
	s.cond = sync.NewCond(&s.mu)
	s.retain = make(chan struct{}, 1)
	s.state = newStateHealth(f.StateDir, s.log)
	s.intake = newIntake(f.StateDir, opts.Now)
	s.max = opts.MaxParallel
	if s.max <= 0 {
		s.max = f.Serve.MaxParallel
	}
	if s.max <= 0 {
		s.max = runtime.NumCPU()
	}
	if opts.StopGrace <= 0 {
		s.opts.StopGrace = 30 * time.Second
	}
	if opts.Listen == "" {
		s.opts.Listen = f.Serve.Listen
	}
	eo := opts.Engine
	if eo.Slots == nil {
		eo.Slots = factory.NewSlots(s.max)
	}
	user := eo.OnEvent
	if eo.RunLink == nil && s.opts.Listen != "" {
		base := "http://" + s.opts.Listen + "/#run="
		eo.RunLink = func(id string) string { return base + id }
	}
	eo.OnEvent = func(ev record.Event) {
		s.gateEvent(ev)
		s.state.event(ev)
		s.bus.publish(ev.Run)
		if user != nil {
			user(ev)
		}
	}
	cl, err := startCluster(f, s.log)
	if err != nil {
		l.Unlock()
		return nil, fmt.Errorf("serve.cluster: %v", err)
	}
	if cl != nil {
		s.cl, eo.Remote = cl, cl.d
		eo.RemoteSlots = factory.NewSlots(f.Serve.Cluster.MaxRunning)
	}
	e, err := factory.New(f, eo)
	if e == nil {
		cl.close()
		l.Unlock()
		return nil, err
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("recovering interrupted runs")
	}
	s.E = e
	for _, id := range e.State.Recovered {
		s.log.Info().Str("run", id).Msg("recovered a run left running by a crash: marked interrupted, worktrees removed")
	}
	s.settleDetached(s.requeue())
	return s, nil
}

// settleDetached ends what a killed serve left running on workers that no
// resumed run re-attaches to (keep lists the attempts resumed runs will):
// their records say interrupted and their workers are told to stop.
func (s *Server) settleDetached(keep []string) {
	if runs, err := s.E.State.Runs(); err == nil {
		for _, rec := range runs {
			if rec.State != status.RunInterrupted {
				continue
			}
			if n, err := s.E.FinishDetached(rec.ID); err != nil {
				s.log.Warn().Str("run", rec.ID).Err(err).Msg("cannot close the attempts it left on workers")
			} else if n > 0 {
				s.log.Info().Str("run", rec.ID).Int("attempts", n).Msg("closed attempts left on workers: the run is not resumed")
			}
		}
	}
	if s.cl != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.cl.d.Settle(ctx, keep)
	}
}

// requeue queues again, with serve.resume, every interrupted run serve
// had queued: those a crash left running (recovered just now, or earlier
// by another kusaw command that opened the state directory first) and
// those a stop interrupted. Oldest first.
func (s *Server) requeue() (reattach []string) {
	if !s.F.Serve.Resume {
		return nil
	}
	runs, err := s.E.State.Runs()
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot list runs to resume")
		return nil
	}
	for i := len(runs) - 1; i >= 0; i-- {
		rec := runs[i]
		if rec.State != status.RunInterrupted {
			continue
		}
		if _, err := os.Stat(filepath.Join(s.E.State.RunDir(rec.ID), record.ServedFile)); err != nil {
			continue // an in-process kusaw run's: not serve's to restart
		}
		r, err := s.E.Resume(rec.ID)
		if err != nil {
			s.log.Warn().Str("run", rec.ID).Err(err).Msg("cannot resume run; it stays interrupted")
			if errors.Is(err, factory.ErrNotResumable) {
				// Not again at every start: the pipeline changed under it.
				os.Remove(filepath.Join(s.E.State.RunDir(rec.ID), record.ServedFile))
			}
			continue
		}
		_, from := r.Resumed()
		again := r.DetachedAttempts()
		s.log.Info().Str("run", rec.ID).Str("from_step", from).Strs("reattach", again).Msg("resuming interrupted run")
		s.queue = append(s.queue, r)
		reattach = append(reattach, again...)
	}
	return reattach
}

// MaxParallel is the number of attempts (and of runs) executed at once.
func (s *Server) MaxParallel() int { return s.max }

// ErrStopping is returned by Submit once serve is stopping.
var ErrStopping = errors.New("kusaw serve is stopping and takes no new runs")

// ErrQueueFull is returned by Submit when maxQueued runs wait.
var ErrQueueFull = errors.New("the run queue is full")

// Submit queues a run of a pipeline. Params become KUSAW_PARAM_<NAME> in
// the environment of the run's steps.
func (s *Server) Submit(pipeline string, params map[string]string) (*record.RunRecord, error) {
	return s.SubmitRequest(factory.RunRequest{Pipeline: pipeline, Params: params})
}

// SubmitRequest queues a run with what intake knows of it (its trigger,
// the run it continues).
func (s *Server) SubmitRequest(req factory.RunRequest) (*record.RunRecord, error) {
	pipeline, params := req.Pipeline, req.Params
	if err := factory.CheckParams(params); err != nil {
		return nil, err
	}
	if fileSum(s.F.Path) != s.fileSum {
		return nil, fmt.Errorf("%w (%s); restart serve to use it", ErrFactoryChanged, s.F.Path)
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil, ErrStopping
	}
	if len(s.queue) >= maxQueued {
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	s.mu.Unlock()
	r, err := s.E.PrepareRequest(factory.RunRequest{Pipeline: pipeline, Params: params, Trigger: req.Trigger, Continues: req.Continues})
	if err != nil {
		return nil, err
	}
	_ = os.WriteFile(filepath.Join(r.Dir, record.ServedFile), nil, record.FileMode())
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.E.Abandon(r, status.RunInterrupted, "kusaw serve stopped before the run started")
		return nil, ErrStopping
	}
	rec := *r.Record // copied before the dispatcher can start changing it
	s.queue = append(s.queue, r)
	s.cond.Broadcast()
	s.mu.Unlock()
	s.bus.publish(rec.ID)
	s.log.Info().Str("run", rec.ID).Str("pipeline", rec.Pipeline).Msg("run queued")
	return &rec, nil
}

// Cancel cancels a queued or running run. A queued run ends at once,
// without starting.
func (s *Server) Cancel(id string) (*record.RunRecord, error) {
	rec, err := s.E.State.LoadRun(id)
	if err != nil {
		return nil, err
	}
	if rec.State.Final() {
		return rec, fmt.Errorf("%w: run %s already ended (%s)", record.ErrRunEnded, rec.ID, rec.State)
	}
	s.mu.Lock()
	for i, r := range s.queue {
		if r.ID() == rec.ID {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			s.mu.Unlock()
			s.E.Abandon(r, status.RunCanceled, "the run was canceled while queued")
			s.log.Info().Str("run", rec.ID).Msg("queued run canceled")
			return s.E.State.LoadRun(rec.ID)
		}
	}
	s.mu.Unlock()
	// A running run, serve's or another kusaw's, is canceled through its
	// cancel file: its owner's engine notices it (even between dispatch
	// and the run's first event), records run.cancel_requested and cancels.
	s.log.Info().Str("run", rec.ID).Msg("cancel requested")
	return s.E.State.RequestCancel(rec.ID)
}

// Counts returns the number of queued and running runs.
func (s *Server) Counts() (queued, running int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), len(s.running)
}

// Peak is the most runs that have run at once.
func (s *Server) Peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// dispatch starts queued runs while slots are free, until stop: serve's
// own (max_parallel) and, with a cluster, the live workers' (bounded by
// serve.cluster.max_running), since a run whose attempts go to workers
// takes none of serve's.
func (s *Server) dispatch(ctx context.Context) {
	if s.cl != nil {
		// Workers come, go and drain: look again now and then.
		go func() {
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s.mu.Lock()
					s.cond.Broadcast()
					s.mu.Unlock()
				}
			}
		}()
	}
	for {
		s.mu.Lock()
		for !s.stopping && (len(s.queue) == 0 || len(s.running)-len(s.waiting) >= s.max+s.remoteCapacity()) {
			s.cond.Wait()
		}
		if s.stopping {
			s.mu.Unlock()
			return
		}
		r := s.queue[0]
		s.queue = s.queue[1:]
		rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		id := r.ID()
		s.running[id] = &activeRun{run: r, cancel: cancel}
		if len(s.running) > s.peak {
			s.peak = len(s.running)
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			start := time.Now()
			s.log.Info().Str("run", id).Msg("run started")
			s.E.Execute(rctx, r)
			cancel(nil)
			s.log.Info().Str("run", id).Str("state", string(r.Record.State)).Dur("duration", time.Since(start)).Msg("run finished")
			s.runEnded(r.Record)
			s.kickRetention()
			s.mu.Lock()
			delete(s.running, id)
			delete(s.waiting, id)
			s.cond.Broadcast()
			s.mu.Unlock()
			s.bus.publish(id)
		}()
	}
}

// remoteCapacity is how many attempts the cluster's workers take at
// once: the slots of every live worker that is not draining, at most
// serve.cluster.max_running.
func (s *Server) remoteCapacity() int {
	if s.cl == nil {
		return 0
	}
	n := 0
	for _, w := range s.cl.d.Workers() {
		if !w.Lost && !w.Stopped && !w.Draining && w.LastSeen != nil {
			n += max(w.MaxParallel, 1)
		}
	}
	if m := s.F.Serve.Cluster.MaxRunning; m > 0 && n > m {
		n = m
	}
	return n
}

// stop ends serve's runs: no new runs; queued runs are recorded
// interrupted; running runs get StopGrace to finish, then are interrupted
// (their processes get SIGTERM, SIGKILL after the kill grace) and recorded
// interrupted. With serve.resume the next start queues them again.
func (s *Server) stop() {
	s.mu.Lock()
	s.stopping = true
	queued := s.queue
	s.queue = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	for _, r := range queued {
		s.E.Abandon(r, status.RunInterrupted, "kusaw serve stopped before the run started")
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(s.opts.StopGrace):
	}
	s.mu.Lock()
	for id, a := range s.running {
		s.log.Warn().Str("run", id).Msg("interrupting run after the stop grace period")
		a.run.Interrupt()
		a.cancel(errors.New("kusaw serve stopped"))
	}
	s.mu.Unlock()
	<-done
}

// bus tells followers of a run that it has something new; they read the
// news from the run's files, which stay the one source of truth.
type bus struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

func newBus() *bus { return &bus{subs: map[string]map[chan struct{}]struct{}{}} }

func (b *bus) subscribe(run string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.subs[run] == nil {
		b.subs[run] = map[chan struct{}]struct{}{}
	}
	b.subs[run][ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs[run], ch)
		if len(b.subs[run]) == 0 {
			delete(b.subs, run)
		}
		b.mu.Unlock()
	}
}

func (b *bus) publish(run string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs[run] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	for ch := range b.subs["*"] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// gateEvent keeps the set of runs waiting at a gate: a waiting run runs
// no attempt, so another queued run may start in its place.
func (s *Server) gateEvent(ev record.Event) {
	switch ev.Type {
	case record.EvGateWaiting:
		s.mu.Lock()
		s.waiting[ev.Run] = true
		s.cond.Broadcast()
		s.mu.Unlock()
	case record.EvGateApproved, record.EvGateRejected, record.EvRunFinished:
		s.mu.Lock()
		delete(s.waiting, ev.Run)
		s.mu.Unlock()
	}
}
