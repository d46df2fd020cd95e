// Package worker is `kusaw worker` (docs/cluster.md): it claims attempts of
// its pools when it has a free slot, runs them through the engine of one
// machine with its own sandbox and proxy, streams their events to serve and
// returns their commits as a bundle, with their logs and artifacts,
// through the object store.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configure a worker.
type Options struct {
	// StateDir holds the identity, the cache repositories and the
	// attempts' folders.
	StateDir    string
	Pools       []string
	MaxParallel int
	Version     string
	// Kusaw is the binary built-in steps and the egress bridge run as.
	Kusaw string
	// TryTimeout bounds one try to store or report an attempt's results
	// (default 30s); failed tries go on while serve cannot be reached.
	TryTimeout time.Duration
	// Logf reports what the worker does (stderr in kusaw worker).
	Logf func(format string, args ...any)
	// AckWait is how long a work message goes without a progress
	// acknowledgement before the queue offers it again (default 10s).
	AckWait time.Duration
	// DrainTimeout is how long running attempts may go on once serve
	// asked the worker to drain (kusaw workers drain) before they are
	// handed back (default 10m: worker.drain_timeout).
	DrainTimeout time.Duration
}

// DefaultDrainTimeout is worker.drain_timeout's default.
const DefaultDrainTimeout = 10 * time.Minute

// ErrPoolNotAllowed: the worker was asked to offer a pool its join token
// does not allow.
var ErrPoolNotAllowed = errors.New("not allowed")

// Folders of a worker's state.
const (
	cacheDir  = "cache" // cache/<repo>: one repository per factory repo
	engineDir = "state" // the engine's state folder (runs/...)
)

// Worker runs attempts for one serve.
type Worker struct {
	o       Options
	id      *cluster.Identity
	nc      *nats.Conn
	h       *cluster.Handles
	host    *attempt.Host // this machine, for the attempts it runs
	started time.Time

	proxyMu sync.Mutex
	proxy   *egress.Proxy // started on the first attempt that needs one

	mu      sync.Mutex
	running map[string]*claimed // by attempt id
	runs    map[string]int      // attempts running here, by run
	have    map[string][]string // repo → commits the cache holds, latest first
	repoMu  map[string]*sync.Mutex
	stop    context.Context // Run's: ends when the worker stops
	lost    chan struct{}   // closed when the connection drops (connLost makes a new one)

	// drain is closed when the worker stops taking attempts (Drain);
	// drainWhy says who asked, drainFor how long running attempts may
	// still take before they are handed back.
	drain     chan struct{}
	drainOnce sync.Once
	drainWhy  string
	drainFor  time.Duration
	handed    int // attempts handed back to serve

	closed    chan struct{} // the connection closed for good (its key refused: retired)
	closeOnce sync.Once
	closing   bool // Close was called
}

// claimed is an attempt this worker holds the claim of.
type claimed struct {
	id      string
	pool    string // the work queue it came from: its claim and objects are there
	token   uint64
	secrets map[string]string
	cancel  context.CancelFunc
	// handedBack: the worker gave the attempt back to serve (a drain
	// that ran out of time, a forced stop); reporting: its result is on
	// its way. One excludes the other (under Worker.mu).
	handedBack, reporting bool
}

// Join enrolls a new worker with a token and saves its identity in
// stateDir. pools are those it means to offer (none: the token's): serve
// refuses a pool the token does not allow. A worker that has joined
// already keeps its identity (keys and name): the token it joined with
// again changes nothing (a service started with --join), and a new one
// enrolls it again, with the new token's pools (and, on an existing NATS
// cluster, a new JWT).
func Join(ctx context.Context, stateDir, token, name, version string, pools []string) (*cluster.Identity, error) {
	tok, err := cluster.ParseToken(token)
	if id, lerr := cluster.LoadIdentity(stateDir); lerr == nil && id.Server != "" {
		if err != nil || id.Joined == cluster.TokenID(tok) {
			return id, nil
		}
		first := id.Joined == ""
		if err := cluster.Enroll(ctx, tok, id, version, pools); err != nil {
			// An earlier kusaw's worker started again with the token it
			// joined with, spent since: it keeps its enrollment.
			if first && strings.Contains(err.Error(), "used already or has expired") {
				return id, nil
			}
			return nil, err
		}
		return id, id.Save(stateDir)
	}
	if err != nil {
		return nil, err
	}
	if !cluster.ValidName(name) {
		return nil, fmt.Errorf("worker name %q: use letters, digits, - and _ (at most 64); set it with --name", name)
	}
	id, err := cluster.NewIdentity(name)
	if err != nil {
		return nil, err
	}
	if err := cluster.Enroll(ctx, tok, id, version, pools); err != nil {
		return nil, err
	}
	return id, id.Save(stateDir)
}

// New opens an enrolled worker: its identity, the connection (which
// reconnects by itself), and its engine.
func New(ctx context.Context, o Options) (*Worker, error) {
	id, err := cluster.LoadIdentity(o.StateDir)
	if errors.Is(err, os.ErrNotExist) || err == nil && id.Server == "" {
		return nil, fmt.Errorf("%w (no enrollment in %s): run kusaw worker --join TOKEN with a token from kusaw cluster token", cluster.ErrNotJoined, o.StateDir)
	}
	if err != nil {
		return nil, err
	}
	if o.MaxParallel <= 0 {
		o.MaxParallel = 1
	}
	// Without --pool a worker offers the pools its token allows (an
	// earlier kusaw's enrollment, or a token of every pool: default).
	if len(o.Pools) == 0 {
		o.Pools = []string{config.DefaultPool}
		if g := id.Grant; g != nil && !g.AnyPool && len(g.Pools) > 0 {
			o.Pools = append([]string(nil), g.Pools...)
		}
	}
	for _, p := range o.Pools {
		if !cluster.ValidName(p) {
			return nil, fmt.Errorf("pool %q: use letters, digits, - and _ (at most 64)", p)
		}
		if g := id.Grant; g != nil && !g.Allows(p) {
			return nil, fmt.Errorf("%w: pool %s: this worker's join token allows pools %s only: make a token with kusaw cluster token --pool %s and join with it from a new --state-dir", ErrPoolNotAllowed, p, g, p)
		}
	}
	if o.AckWait <= 0 {
		o.AckWait = 10 * time.Second
	}
	if o.TryTimeout <= 0 {
		o.TryTimeout = 30 * time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	w := &Worker{o: o, id: id, started: time.Now().UTC(), running: map[string]*claimed{}, runs: map[string]int{}, have: map[string][]string{}, repoMu: map[string]*sync.Mutex{},
		lost: make(chan struct{}), drain: make(chan struct{}), closed: make(chan struct{})}
	w.cleanLeftovers()
	if w.host, err = w.newHost(); err != nil {
		return nil, err
	}
	w.nc, err = cluster.Dial(id, "kusaw worker "+id.Name,
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			// It is the NATS server that went, which is serve only
			// when serve embeds it (a stream leader election on a
			// NATS cluster is not serve's doing).
			o.Logf("disconnected from the NATS server at %s: %v (retrying)", cluster.Where(nc), err)
			w.connLost()
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { o.Logf("reconnected to the NATS server at %s", cluster.Where(nc)) }),
		// The client gives up only when the server refuses its key again
		// and again: serve retired the worker.
		nats.ClosedHandler(func(*nats.Conn) { w.closeOnce.Do(func() { close(w.closed) }) }))
	if err != nil {
		return nil, err
	}
	if w.h, err = cluster.Open(ctx, w.nc); err != nil {
		w.nc.Close()
		return nil, err
	}
	return w, nil
}

// Name is the worker's enrolled name.
func (w *Worker) Name() string { return w.id.Name }

// Pools are the pools the worker offers.
func (w *Worker) Pools() []string { return w.o.Pools }

// Close ends the connection.
func (w *Worker) Close() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	if w.nc != nil {
		w.nc.Close()
	}
	w.proxyMu.Lock()
	defer w.proxyMu.Unlock()
	if w.proxy != nil {
		_ = w.proxy.Close()
		w.proxy = nil
	}
}

// newHost is the machine the worker's attempts run on: its own state
// folder, its signing key, the secrets serve seals to it, a proxy of its
// own, and its identity hidden from every sandbox.
func (w *Worker) newHost() (*attempt.Host, error) {
	// A worker killed with -9 left its attempts' cgroups, and whatever
	// runs in them.
	proc.ReapStaleGroups()
	kusaw := w.o.Kusaw
	if kusaw == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("cannot find the kusaw binary for built-in steps: %v", err)
		}
		kusaw = exe
	}
	state := filepath.Join(w.o.StateDir, engineDir)
	for _, d := range []string{state, filepath.Join(state, record.RunsDir)} {
		if err := os.MkdirAll(d, record.DirMode()); err != nil {
			return nil, fmt.Errorf("cannot create the state directory %s: %v", d, err)
		}
		if err := os.Chmod(d, record.DirMode()); err != nil {
			return nil, fmt.Errorf("cannot make %s private: %v", d, err)
		}
	}
	return &attempt.Host{StateDir: state, Kusaw: kusaw, KillGrace: attempt.DefaultKillGrace, Key: w.id.SigningKey(),
		Secrets: func() (attempt.SecretSource, error) { return w, nil }, Proxy: w.ownProxy, OnEvent: w.forward,
		Hide: []string{filepath.Join(w.o.StateDir, cluster.IdentityFile)}}, nil
}

// ownProxy is the worker's egress proxy, started on first use.
func (w *Worker) ownProxy() (*egress.Proxy, error) {
	w.proxyMu.Lock()
	defer w.proxyMu.Unlock()
	if w.proxy == nil {
		p, err := egress.NewProxy(egress.Options{})
		if err != nil {
			return nil, err
		}
		w.proxy = p
	}
	return w.proxy, nil
}

// runDir is the folder of a run's attempts here.
func (w *Worker) runDir(run string) string {
	return filepath.Join(w.o.StateDir, engineDir, record.RunsDir, run)
}

// cleanLeftovers removes what a previous run of the worker left: attempt
// folders and the cache's attempt worktrees and branches. Attempts it held
// are serve's to dispatch again.
func (w *Worker) cleanLeftovers() {
	_ = os.RemoveAll(filepath.Join(w.o.StateDir, engineDir, record.RunsDir))
	entries, _ := os.ReadDir(filepath.Join(w.o.StateDir, cacheDir))
	for _, e := range entries {
		repo := filepath.Join(w.o.StateDir, cacheDir, e.Name())
		_ = exec.Command("git", "-C", repo, "worktree", "prune").Run()
		out, _ := exec.Command("git", "-C", repo, "for-each-ref", "--format=%(refname)", "refs/heads/kusaw/").Output()
		for _, ref := range strings.Fields(string(out)) {
			_ = exec.Command("git", "-C", repo, "update-ref", "-d", ref).Run()
		}
	}
}

// Get resolves a secret for the engine: the worker's own secret store
// first (kusaw config set --secret on this machine), then what serve
// sealed to this worker for a running attempt.
func (w *Worker) Get(key string) (string, error) {
	if st, err := secretstore.Open(); err == nil {
		if v, err := st.Get(key); err == nil {
			return v, nil
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.running {
		if v, ok := a.secrets[key]; ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("secret %s: not on this worker and not given by serve", key)
}

// forward streams an engine event of a running attempt to serve: only
// the types a worker may send (the attempt's start and end, its commit
// and branch are serve's to write, on serve's side; serve refuses them).
func (w *Worker) forward(ev record.Event) {
	if ev.Step == "" || !record.WorkerMaySend(ev.Type) {
		return
	}
	id := record.AttemptID(ev.Run, ev.Step, ev.Attempt)
	w.mu.Lock()
	a := w.running[id]
	back := a != nil && a.handedBack
	w.mu.Unlock()
	if a == nil || back {
		return // not ours, or given back to serve: its events stop here
	}
	b, _ := json.Marshal(cluster.Event{Attempt: id, Worker: w.id.Name, Token: a.token, TS: ev.TS, Type: ev.Type, Data: ev.Data})
	_ = w.nc.Publish(cluster.EventsSubject(cluster.Key(id), w.id.Name), b)
}

// Run takes attempts until ctx ends or the worker drained (Drain, or
// serve's kusaw workers drain). When ctx ends, attempts still running are
// handed back to serve at once (lost: dispatched again, not counted
// against their steps) and then stopped.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	w.stop = ctx
	w.mu.Unlock()
	hctx, hstop := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() { defer close(beating); w.heartbeat(hctx) }()
	defer func() {
		hstop()
		<-beating
		if !w.nc.IsClosed() {
			w.beat(context.Background(), true)
		}
	}()
	if sub, err := w.nc.Subscribe(cluster.ControlSubject(w.id.Name), w.control); err == nil {
		defer sub.Unsubscribe()
	}
	slots := make(chan struct{}, w.o.MaxParallel)
	var wg sync.WaitGroup
	for _, pool := range w.o.Pools {
		cons, err := w.h.JS.CreateOrUpdateConsumer(ctx, cluster.WorkStream, jetstream.ConsumerConfig{Durable: cluster.WorkConsumer(pool),
			FilterSubject: cluster.WorkSubject(pool), AckPolicy: jetstream.AckExplicitPolicy, AckWait: w.o.AckWait})
		if err != nil {
			return fmt.Errorf("pool %s: %v (a worker takes only the pools its join token allows: make a token with kusaw cluster token --pool %s)", pool, err, pool)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && !w.Draining() {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				case <-w.drain:
					return
				case <-w.closed:
					return
				}
				msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
				if err != nil {
					<-slots
					continue
				}
				if w.Draining() {
					// Offered back at once, not after its ack wait.
					_ = msg.Nak()
					<-slots
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					w.take(ctx, msg)
				}()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var timeout <-chan time.Time
	drain := w.drain
	for {
		select {
		case <-done:
			w.drained()
			return nil
		case <-drain:
			drain = nil
			w.mu.Lock()
			n, d := len(w.running), w.drainFor
			w.mu.Unlock()
			if n > 0 {
				w.o.Logf("draining (%s): no new attempts; %d running may finish within %s, then go back to serve", w.drainWhy, n, d)
			}
			timeout = time.After(d)
		case <-timeout:
			w.handBackAll(fmt.Sprintf("worker %s drained (%s) and its drain timeout of %s ran out", w.id.Name, w.drainWhy, w.drainFor))
		case <-ctx.Done():
			w.handBackAll(fmt.Sprintf("worker %s was stopped at once", w.id.Name))
			<-done
			w.drained()
			return nil
		case <-w.closed:
			w.mu.Lock()
			closing := w.closing
			w.mu.Unlock()
			if closing {
				continue
			}
			for _, a := range w.runningNow() {
				a.cancel()
			}
			<-done
			return fmt.Errorf("%w (the connection to the NATS server closed: a retired worker's key is refused)", cluster.ErrNotEnrolled)
		}
	}
}

func (w *Worker) runningNow() []*claimed {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*claimed
	for _, a := range w.running {
		out = append(out, a)
	}
	return out
}

// Drain makes the worker take no new attempts; the running ones may
// finish within timeout, then they are handed back to serve. Run returns
// when none runs. Later calls change nothing.
func (w *Worker) Drain(why string, timeout time.Duration) {
	w.drainOnce.Do(func() {
		w.mu.Lock()
		w.drainWhy, w.drainFor = why, timeout
		w.mu.Unlock()
		close(w.drain)
	})
}

// Draining reports whether the worker takes no new attempts.
func (w *Worker) Draining() bool {
	select {
	case <-w.drain:
		return true
	default:
		return false
	}
}

func (w *Worker) drained() {
	if !w.Draining() {
		return
	}
	w.mu.Lock()
	n := w.handed
	w.mu.Unlock()
	w.o.Logf("drained (%s): %d attempt(s) handed back to serve", w.drainWhy, n)
}

// control takes serve's requests for this worker (only serve may publish
// on its control subject): drain.
func (w *Worker) control(m *nats.Msg) {
	var c cluster.Control
	if json.Unmarshal(m.Data, &c) != nil {
		return
	}
	if c.Drain {
		d := w.o.DrainTimeout
		if c.Timeout > 0 {
			d = c.Timeout
		}
		w.Drain("kusaw workers drain on serve", d)
	}
}

// handBackAll gives every running attempt back to serve as lost (it is
// dispatched again, not counted against its step) and stops it here; an
// attempt whose result is on its way already is left to report.
func (w *Worker) handBackAll(why string) {
	w.mu.Lock()
	var back []*claimed
	for _, a := range w.running {
		if !a.reporting && !a.handedBack {
			a.handedBack = true
			w.handed++
			back = append(back, a)
		}
	}
	w.mu.Unlock()
	w.handBack(back, why)
}

// handBack sends serve the hand-back of attempts marked handedBack, then
// stops them.
func (w *Worker) handBack(back []*claimed, why string) {
	w.mu.Lock()
	for _, a := range back {
		if !a.handedBack && !a.reporting {
			a.handedBack = true
			w.handed++
		}
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, a := range back {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := cluster.Result{Attempt: a.id, Worker: w.id.Name, Token: a.token, HandedBack: why}
			b, _ := json.Marshal(res)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := w.h.JS.Publish(ctx, cluster.ResultSubject(cluster.Key(a.id), w.id.Name), b, jetstream.WithMsgID(fmt.Sprintf("%s/%d", a.id, a.token)))
			if err != nil {
				w.o.Logf("attempt %s: cannot hand it back (%v): serve finds it lost after its lost_after", a.id, err)
			} else {
				w.o.Logf("attempt %s: handed back to serve (%s)", a.id, why)
			}
			a.cancel()
		}()
	}
	wg.Wait()
}

func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		w.beat(ctx, false)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat puts the worker's heartbeat; the last one, when it stops, says so
// (serve shows it stopped, not lost).
func (w *Worker) beat(ctx context.Context, stopped bool) {
	w.mu.Lock()
	hb := cluster.Heartbeat{Name: w.id.Name, Pools: w.o.Pools, MaxParallel: w.o.MaxParallel, Version: w.o.Version, Started: w.started, TS: time.Now().UTC(), Running: []cluster.Running{},
		Draining: w.Draining(), Stopped: stopped}
	if !stopped {
		for _, a := range w.running {
			hb.Running = append(hb.Running, cluster.Running{Attempt: a.id, Token: a.token})
		}
	}
	hb.Have = map[string][]string{}
	for repo, list := range w.have {
		hb.Have[repo] = append([]string(nil), list...)
	}
	w.mu.Unlock()
	sort.Slice(hb.Running, func(i, j int) bool { return hb.Running[i].Attempt < hb.Running[j].Attempt })
	b, _ := json.Marshal(hb)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, _ = w.h.Workers.Put(pctx, w.id.Name, b)
	cancel()
}
