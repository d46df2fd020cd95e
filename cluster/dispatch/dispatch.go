// Package dispatch is serve's side of the cluster (docs/cluster.md): it
// publishes ready attempts to their pool's work queue, hands secrets
// sealed to the claiming worker, writes the worker's streamed events into
// serve's sealed records, watches heartbeats, marks a silent worker's
// attempts lost, fences late results, and imports returned commits
// re-hashed.
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/record"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configure a Dispatcher.
type Options struct {
	NC       *nats.Conn
	H        *cluster.Handles
	Identity *cluster.Identity // serve's: seals secrets
	Registry *cluster.Registry // enrolled workers' keys
	// Dir is state_dir/cluster: fenced results are recorded here.
	Dir string
	// LostAfter: a worker silent this long has lost its attempts.
	LostAfter time.Duration
	// LocalWorker: serve runs pool default itself.
	LocalWorker bool
	// Metrics, when set, counts what happens.
	Metrics *Metrics
	// AwaitSettle: serve calls Settle once it resumed its runs; until
	// then late results are not recorded as fenced.
	AwaitSettle bool
	// Disconnect, when set, closes the connections of a retired worker's
	// nkey (the embedded server; on an existing cluster the account
	// revokes it).
	Disconnect func(nkey string) int
	// SweepEvery is how often serve removes claims and objects of
	// attempts it does not wait for (Sweep); zero: a minute.
	SweepEvery time.Duration
}

// FencedFile records results refused because their token was stale.
const FencedFile = "fenced.jsonl"

// Dispatcher runs attempts on workers; it implements factory.Remote.
type Dispatcher struct {
	o Options

	mu     sync.Mutex
	seen   map[string]time.Time // worker → when serve last heard its heartbeat (serve's clock)
	hb     map[string]cluster.Heartbeat
	active map[string]bool // attempt keys Run is waiting on
	// kept: keys Settle kept for resumed runs that have not re-attached
	// yet; the sweep leaves them.
	kept map[string]bool
	// down: serve's own connection to NATS is down (since downSince);
	// meanwhile no worker is found lost, and lost_after counts again from
	// when it is back.
	down        bool
	downSince   time.Time
	disconnects int
	// backAt is when the connection came back; heard, whether any
	// heartbeat came since (the heartbeats' watcher may take a moment
	// to follow again).
	backAt time.Time
	heard  bool
	// settled: serve has said which claims a previous serve left it keeps
	// (Settle); until then a result nobody waits for may be one a resumed
	// run is about to re-attach to, and is not recorded as fenced.
	settled bool

	bundles bundleCache // the bundles of code serve made, shared by attempts dispatched together
}

// New starts watching heartbeats and late results.
func New(ctx context.Context, o Options) (*Dispatcher, error) {
	if o.LostAfter <= 0 {
		o.LostAfter = 15 * time.Second
	}
	d := &Dispatcher{o: o, seen: map[string]time.Time{}, hb: map[string]cluster.Heartbeat{}, active: map[string]bool{}, settled: !o.AwaitSettle}
	w, err := o.H.Workers.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	go d.keepWatching(ctx, w)
	go d.sweepLoop(ctx)
	sub, err := o.NC.Subscribe("kusaw.result.>", d.lateResult)
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); _ = sub.Unsubscribe(); d.bundles.close() }()
	return d, nil
}

// Takes reports whether attempts of pool go to workers.
func (d *Dispatcher) Takes(pool string) bool {
	return !(d.o.LocalWorker && (pool == "" || pool == "default"))
}

// keepWatching reads heartbeats from w and makes a new watcher when w
// ends or goes quiet: its consumer lives on one NATS server (the
// bucket's leader when it was made), and when that server goes (a kill
// of the leader, every server down) nats.go may not notice for long.
// Without heartbeats serve would find every worker lost. Workers beat
// every second, so a bucket silent for a third of lost_after while serve
// is connected means the watcher, not the workers.
func (d *Dispatcher) keepWatching(ctx context.Context, w jetstream.KeyWatcher) {
	quiet := max(d.o.LostAfter/3, 2*time.Second)
	replay := false
	for {
		d.watchHeartbeats(ctx, w.Updates(), replay, quiet)
		_ = w.Stop()
		replay = true
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			var err error
			if w, err = d.o.H.Workers.WatchAll(ctx); err == nil {
				break
			}
		}
	}
}

// watchHeartbeats takes heartbeats from ch until it closes, ctx ends, or
// (serve connected, some worker heard) none came for quiet. A new
// watcher (replay) first delivers each worker's last heartbeat again,
// however old: those say nothing of the worker now, so only a worker
// serve has not heard of yet is taken from them.
func (d *Dispatcher) watchHeartbeats(ctx context.Context, ch <-chan jetstreamEntry, replay bool, quiet time.Duration) {
	tick := time.NewTicker(quiet / 2)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			d.mu.Lock()
			deaf := false
			if !d.down && d.o.NC.IsConnected() {
				for _, t := range d.seen {
					// a worker heard of late: one still beating, unless the
					// watcher is deaf (every worker gone stops this soon)
					deaf = deaf || time.Since(t) < 3*d.o.LostAfter
				}
			}
			d.mu.Unlock()
			if deaf && time.Since(last) > quiet {
				return
			}
		case e, ok := <-ch:
			if !ok {
				return
			}
			if e == nil {
				replay = false // the watcher's "caught up" marker
				continue
			}
			var hb cluster.Heartbeat
			if json.Unmarshal(e.Value(), &hb) != nil || hb.Name != e.Key() {
				continue
			}
			d.mu.Lock()
			_, known := d.seen[hb.Name]
			if replay && known {
				d.mu.Unlock()
				continue
			}
			last = time.Now()
			d.seen[hb.Name], d.hb[hb.Name] = last, hb
			d.heard = true
			d.mu.Unlock()
			if d.o.Registry != nil {
				d.o.Registry.Offered(hb.Name, hb.Pools)
			}
			if d.o.Metrics != nil {
				d.o.Metrics.running(hb.Name, len(hb.Running))
			}
		}
	}
}

// ConnChanged tells the dispatcher that serve's connection to NATS went
// down or came back (nats.go's handlers). Heartbeats cannot arrive while
// it is down: every worker is then given lost_after from its return.
func (d *Dispatcher) ConnChanged(up bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	switch {
	case !up && !d.down:
		d.down, d.downSince = true, now
		d.disconnects++
	case up && d.down:
		d.down, d.backAt, d.heard = false, now, false
		for w, t := range d.seen {
			if t.Before(now) {
				d.seen[w] = now
			}
		}
	}
	if d.o.Metrics != nil {
		v := 1.0
		if d.down {
			v = 0
		}
		d.o.Metrics.Connected.Set(v)
	}
}

// Connection reports serve's connection to NATS: up, or down since when,
// and how often it dropped.
func (d *Dispatcher) Connection() (up bool, downSince time.Time, disconnects int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	up = !d.down && d.o.NC.IsConnected()
	if !up && !d.down {
		downSince = time.Now() // the handler has not run yet
	}
	if d.down {
		downSince = d.downSince
	}
	return up, downSince, d.disconnects
}

// WorkerStatus is one line of kusaw workers.
type WorkerStatus struct {
	Name        string     `json:"name"`
	Pools       []string   `json:"pools"`
	Allowed     []string   `json:"allowed_pools"` // cluster.AnyPool: every pool
	Running     int        `json:"running"`
	MaxParallel int        `json:"max_parallel"`
	Version     string     `json:"version,omitempty"`
	LastSeen    *time.Time `json:"last_heartbeat,omitempty"`
	Lost        bool       `json:"lost"`
	Draining    bool       `json:"draining,omitempty"`
	Stopped     bool       `json:"stopped,omitempty"` // its last heartbeat said it stopped (a drain, a signal)
	Enrolled    time.Time  `json:"enrolled"`
}

// Workers lists every enrolled worker with its last heartbeat.
func (d *Dispatcher) Workers() []WorkerStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []WorkerStatus
	for _, e := range d.o.Registry.List() {
		ws := WorkerStatus{Name: e.Name, Pools: e.Pools, Allowed: e.Allowed, Enrolled: e.Enrolled, Lost: true}
		if e.AnyPool {
			ws.Allowed = []string{cluster.AnyPool}
		}
		if hb, ok := d.hb[e.Name]; ok {
			t := d.seen[e.Name].UTC()
			ws.Pools, ws.Running, ws.MaxParallel, ws.Version, ws.LastSeen = hb.Pools, len(hb.Running), hb.MaxParallel, hb.Version, &t
			ws.Lost = time.Since(t) > d.o.LostAfter && !d.down
			ws.Draining, ws.Stopped = hb.Draining, hb.Stopped
			ws.Lost = ws.Lost && !hb.Stopped
		}
		if ws.Pools == nil {
			ws.Pools = []string{}
		}
		if ws.Allowed == nil {
			ws.Allowed = []string{}
		}
		out = append(out, ws)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// alive reports whether worker's heartbeat is fresh and it still runs the
// attempt it claimed at claimedAt (a worker that restarted since forgot it).
func (d *Dispatcher) alive(worker string, claimedAt time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.o.Registry != nil && d.o.Registry.Get(worker) == nil {
		return false // retired
	}
	if d.down || !d.o.NC.IsConnected() {
		return true // serve cannot hear anyone: no one is lost for it
	}
	if !d.backAt.IsZero() && !d.heard && time.Since(d.backAt) < 3*d.o.LostAfter {
		// Back, but no heartbeat of anyone's has come through yet: still
		// serve's deafness, not the worker's silence (bounded, in case
		// every worker is gone).
		return true
	}
	seen, ok := d.seen[worker]
	if !ok {
		// Not heard since serve started: give it lost_after from now.
		d.seen[worker] = time.Now()
		return true
	}
	if hb := d.hb[worker]; hb.Started.After(claimedAt.Add(time.Second)) {
		return false
	}
	return time.Since(seen) <= d.o.LostAfter
}

// ErrNoWorker: no enrolled worker has the name.
var ErrNoWorker = errors.New("no such worker")

// Drain asks worker to take no new attempts and to stop once those it
// runs ended (within timeout, 0: its own drain_timeout; then they come
// back lost and go to other workers). It returns once the worker's
// heartbeat says it drains.
func (d *Dispatcher) Drain(ctx context.Context, worker string, timeout time.Duration) error {
	if d.o.Registry.Get(worker) == nil {
		return fmt.Errorf("%w: no worker named %s is enrolled (kusaw workers lists them)", ErrNoWorker, worker)
	}
	d.mu.Lock()
	seen, ok := d.seen[worker]
	stopped := d.hb[worker].Stopped
	d.mu.Unlock()
	if !ok || stopped || time.Since(seen) > d.o.LostAfter {
		return fmt.Errorf("worker %s is not running (stopped, or no heartbeat for %s): there is nothing to drain; kusaw workers retire %s removes it", worker, d.o.LostAfter, worker)
	}
	b, _ := json.Marshal(cluster.Control{Drain: true, Timeout: timeout})
	if err := d.o.NC.Publish(cluster.ControlSubject(worker), b); err != nil {
		return err
	}
	_ = d.o.NC.FlushWithContext(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		d.mu.Lock()
		draining := d.hb[worker].Draining
		d.mu.Unlock()
		if draining {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("worker %s did not say it drains within 5s: a worker of an older kusaw drains on SIGTERM only, so send it one on its machine", worker)
}

// Retire removes worker for good: its enrollment is revoked (it cannot
// connect or take anything again, its name is not given again), its
// connections are closed, and attempts it held end lost and go to other
// workers. Its keys stay, so log verify still checks what it sealed.
func (d *Dispatcher) Retire(ctx context.Context, worker string) (held int, err error) {
	e, ok := d.o.Registry.Retire(worker)
	if !ok {
		return 0, fmt.Errorf("%w: no worker named %s is enrolled (kusaw workers lists them)", ErrNoWorker, worker)
	}
	d.mu.Lock()
	held = len(d.hb[worker].Running)
	delete(d.hb, worker)
	delete(d.seen, worker)
	d.mu.Unlock()
	if d.o.Disconnect != nil {
		d.o.Disconnect(e.NKey)
	}
	// A delete marker: the heartbeats take no roll-up, which a purge is.
	_ = d.o.H.Workers.Delete(ctx, worker)
	if d.o.Metrics != nil {
		d.o.Metrics.Running.DeleteLabelValues(worker)
	}
	return held, nil
}

// lateResult records a result nobody waits for: a fenced worker's, or
// one that arrives after serve gave up on the attempt.
func (d *Dispatcher) lateResult(m *nats.Msg) {
	var r cluster.Result
	if json.Unmarshal(m.Data, &r) != nil || r.Worker != cluster.SenderOf(m.Subject) {
		return
	}
	d.mu.Lock()
	// kept: a resumed run re-attaches to it soon and reads its result
	// from the events stream then.
	waiting := d.active[cluster.Key(r.Attempt)] || d.kept[cluster.Key(r.Attempt)] || !d.settled
	d.mu.Unlock()
	if waiting {
		return
	}
	d.recordFenced(r, "nobody waits for this attempt any more")
}

func (d *Dispatcher) recordFenced(r cluster.Result, why string) {
	if d.o.Metrics != nil {
		d.o.Metrics.Fenced.Inc()
	}
	line, _ := json.Marshal(map[string]any{"ts": time.Now().UTC(), "attempt": r.Attempt, "worker": r.Worker, "token": r.Token, "heads": r.Heads, "why": why})
	f, err := os.OpenFile(filepath.Join(d.o.Dir, FencedFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

// Release gives up an attempt nobody re-attaches to (factory.Remote): its
// worker is told to stop, its claim and objects go. A result it still
// sends is recorded as fenced.
func (d *Dispatcher) Release(attemptID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.o.NC.Publish(cluster.CancelSubject(cluster.Key(attemptID)), nil)
	// Its pool is not at hand here: an attempt has a claim and objects in
	// one pool only, and serve has few pools.
	pools, _ := d.o.H.Pools(ctx)
	for _, p := range pools {
		_ = d.o.H.Revoke(ctx, p, attemptID)
		_ = d.o.H.DeleteObjects(ctx, p, attemptID)
	}
}

// Settle ends what a previous serve left in the cluster that nobody will
// re-attach to: every claim but keep's (attempt ids) is released, its
// worker told to stop, and objects of attempts neither kept nor running
// go. Serve calls it once, after it resumed its runs.
func (d *Dispatcher) sweepLoop(ctx context.Context) {
	every := d.o.SweepEvery
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Sweep(ctx)
		}
	}
}

// Sweep removes the claims and objects of every attempt serve does not
// wait for: junk keys a worker claimed or stored for attempts that never
// were (they would hold their pool's room until serve restarted), and
// what an ended attempt left when its clean-up failed. Until Settle has
// said which claims a resumed run keeps, it removes nothing. Keys are
// listed before serve's attempts are looked at: an attempt is registered
// before anything of it is claimed or stored, so one listed and not
// registered has ended or never was.
func (d *Dispatcher) Sweep(ctx context.Context) (claims, objects int) {
	d.mu.Lock()
	settled := d.settled
	d.mu.Unlock()
	if !settled {
		return 0, 0
	}
	pools, _ := d.o.H.Pools(ctx)
	for _, p := range pools {
		keys, _ := d.o.H.ClaimedKeys(ctx, p)
		objs, _ := d.o.H.ObjectKeys(ctx, p)
		d.mu.Lock()
		active := maps.Clone(d.active)
		maps.Copy(active, d.kept)
		d.mu.Unlock()
		for _, key := range keys {
			if !active[key] {
				_ = d.o.NC.Publish(cluster.CancelSubject(key), nil)
				if d.o.H.Revoke(ctx, p, key) == nil {
					claims++
				}
			}
		}
		for _, key := range objs {
			if !active[key] && d.o.H.DeleteObjects(ctx, p, key) == nil {
				objects++
			}
		}
	}
	return claims, objects
}

func (d *Dispatcher) Settle(ctx context.Context, keep []string) {
	kept := map[string]bool{}
	for _, id := range keep {
		kept[cluster.Key(id)] = true
	}
	d.mu.Lock()
	for k := range d.active {
		kept[k] = true
	}
	d.mu.Unlock()
	// An attempt's key stands for its id below: Key of a key is itself.
	pools, _ := d.o.H.Pools(ctx)
	for _, p := range pools {
		keys, _ := d.o.H.ClaimedKeys(ctx, p)
		for _, key := range keys {
			if kept[key] {
				continue
			}
			_ = d.o.NC.Publish(cluster.CancelSubject(key), nil)
			_ = d.o.H.Revoke(ctx, p, key)
		}
		keys, _ = d.o.H.ObjectKeys(ctx, p)
		for _, key := range keys {
			if !kept[key] {
				_ = d.o.H.DeleteObjects(ctx, p, key)
			}
		}
	}
	d.mu.Lock()
	d.settled = true
	d.kept = map[string]bool{}
	for _, id := range keep {
		if !d.active[cluster.Key(id)] {
			d.kept[cluster.Key(id)] = true
		}
	}
	d.mu.Unlock()
}

// verifyEgress checks a worker's egress.log against the key it enrolled.
func (d *Dispatcher) verifyEgress(path, worker string, spec *record.AttemptSpec) error {
	e := d.o.Registry.Get(worker)
	if e == nil {
		return fmt.Errorf("worker %s is not enrolled", worker)
	}
	pub, err := cluster.PublicSigningKey(e.NKey)
	if err != nil {
		return err
	}
	res, err := chainlog.VerifyFile(path, pub, chainlog.Binding{Run: spec.Run, Step: spec.Step, Attempt: spec.Number, Kind: chainlog.KindEgress})
	if err != nil {
		return err
	}
	if res.Unsealed() != 0 {
		return fmt.Errorf("%d unsealed lines", res.Unsealed())
	}
	return nil
}

// Result is re-exported for serve's API (the remote result type).
type Result = record.RemoteResult
