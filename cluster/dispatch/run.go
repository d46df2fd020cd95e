package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type jetstreamEntry = jetstream.KeyValueEntry

// maxArtifacts bounds what a worker may return as artifacts.
const maxArtifacts = 1 << 30

// fenceWait is how long serve tries to read a claim before it takes a
// message for a stale holder's.
const fenceWait = 30 * time.Second

// cancelWait is how long a canceled attempt's worker has to report.
const cancelWait = 30 * time.Second

// Run dispatches one attempt and waits for it (factory.Remote).
func (d *Dispatcher) Run(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob) record.RemoteResult {
	a, res, ok := d.begin(ctx, spec, job, 0)
	if !ok {
		return res
	}
	defer a.end()
	if err := untilNATS(ctx, func() error { return d.o.H.EnsurePool(ctx, poolOf(spec)) }); err != nil {
		return record.RemoteResult{Message: err.Error()}
	}
	// A fresh attempt has no claim of right before its work is published:
	// one already there was planted by a worker that guessed the id (a
	// run's, a step's and a number), and would take the attempt from the
	// worker that pulls the work.
	if _, tok, err := d.o.H.Holder(ctx, poolOf(spec), spec.ID); err != nil || tok != 0 {
		_ = d.o.H.Revoke(ctx, poolOf(spec), spec.ID)
	}

	// Code travels as bundles of the commits the attempt reads (the base
	// commits, then a merge's or a judge's), against what every live
	// worker of the pool already holds.
	w := cluster.Work{Inputs: map[string]string{}}
	before := map[string][]string{} // repo → the commits listed before: the worker has them by then
	for _, n := range spec.Needs() {
		have := d.held(spec.Pool, n.Repo)
		earlier := before[n.Repo]
		before[n.Repo] = append(earlier, n.Commit)
		if slices.Contains(have, n.Commit) {
			continue // every worker that may take it holds it already
		}
		base := isBase(spec, n)
		prefix := "in-"
		if !base {
			prefix = "in-" + n.Commit + "-"
		}
		name, err := d.putBundle(ctx, spec, job, n, append(have, earlier...), prefix)
		if err != nil {
			return record.RemoteResult{Message: err.Error()}
		}
		if base {
			w.Inputs[n.Repo] = name
		} else {
			w.More = append(w.More, cluster.Input{Repo: n.Repo, Commit: n.Commit, Object: name})
		}
	}
	w.Spec, _ = spec.Marshal()
	a.published = time.Now()
	w.Published = a.published.UTC()
	work, _ := json.Marshal(w)
	// Tried again through an election: the message id lets the stream
	// drop a copy whose first try it had kept without answering.
	var ack *jetstream.PubAck
	msgID := fmt.Sprintf("%s@%d", a.key, a.published.UnixNano())
	err := untilNATS(ctx, func() (err error) {
		ack, err = d.o.H.JS.Publish(ctx, cluster.WorkSubject(spec.Pool), work, jetstream.WithMsgID(msgID))
		return err
	})
	if err != nil {
		return record.RemoteResult{Message: "cannot publish the attempt: " + err.Error()}
	}
	a.work, a.workSeq = work, ack.Sequence
	defer func() { d.dropWork(ctx, a.workSeq) }()
	d.o.Metrics.queued(spec.Pool, 1)
	a.queued = true
	job.Emit(record.EvClusterDispatched, map[string]any{"pool": spec.Pool})
	return a.wait()
}

// Reattach waits again for an attempt a previous serve dispatched, which
// worker holds with token (factory.Remote). The worker's events and result
// from while serve was down are in the events stream: the wait reads them
// from after the last event serve wrote. A claim that moved on, or a
// worker that does not answer within lost_after, ends it as lost.
func (d *Dispatcher) Reattach(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, worker string, token uint64) record.RemoteResult {
	a, res, ok := d.begin(ctx, spec, job, lastStreamSeq(filepath.Join(job.Dir, record.EventsFile)))
	if !ok {
		return res
	}
	defer a.end()
	c, cur, err := d.o.H.Holder(ctx, poolOf(spec), spec.ID)
	if err != nil || cur != token || c.Worker != worker || !a.mayTake(worker) {
		d.o.Metrics.lost()
		return record.RemoteResult{Lost: true, Worker: worker, Token: token, Message: fmt.Sprintf("serve restarted and worker %s no longer holds the attempt", worker)}
	}
	a.holder, a.token = c, cur
	return a.wait()
}

// lastStreamSeq is the events stream's sequence of the last worker event
// written into an attempt's events file (0: none).
func lastStreamSeq(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var last uint64
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Data struct {
				Seq uint64 `json:"stream_seq"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Data.Seq > last {
			last = ev.Data.Seq
		}
	}
	return last
}

// waiting is one attempt serve waits for.
type waiting struct {
	d         *Dispatcher
	ctx       context.Context
	spec      *record.AttemptSpec
	job       record.RemoteJob
	key, tmp  string
	published time.Time
	queued    bool // counted in the pool's queue depth until claimed

	msgs    chan jetstream.Msg // events and results, from the events stream
	secrets chan *nats.Msg
	bundles chan *nats.Msg
	stop    []func()
	holder  cluster.Claim
	token   uint64
	started bool // the worker's process.started was seen
	claimed bool
	refused map[string]bool // event types of the worker's refused (fromWorker)
	// work is the attempt's work message and workSeq its sequence in
	// the work stream (none when re-attached): offered again when a
	// worker that may not take the pool claimed it.
	work    []byte
	workSeq uint64

	// The events stream is read by an ordered consumer, which lives on
	// one NATS server; follow makes it, refollow a new one after the
	// last message taken when the stream went quiet (see refollowAfter).
	cfg      jetstream.OrderedConsumerConfig
	live     context.Context
	mu       sync.Mutex
	lastSeq  uint64
	lastMsg  time.Time
	stopCons func()
}

// refollowAfter: an attempt whose events stream gave nothing this long
// while serve is connected gets a new consumer. The ordered consumer
// lives on the stream leader's server; when that server is killed
// nats.go may not notice for minutes, and the worker's result, stored by
// the new leader, would never be read. A quiet step costs one consumer
// made again now and then.
const refollowAfter = 15 * time.Second

// follow (again) makes the attempt's consumer of the events stream, from
// after the last message taken.
func (a *waiting) follow() error {
	a.mu.Lock()
	old := a.stopCons
	a.stopCons = nil
	cfg := a.cfg
	if a.lastSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, a.lastSeq+1
	}
	a.mu.Unlock()
	if old != nil {
		old() // outside the lock: its callback takes it
	}
	try, cancel := context.WithTimeout(a.ctx, 5*time.Second)
	defer cancel()
	cons, err := a.d.o.H.JS.OrderedConsumer(try, cluster.EventsStream, cfg)
	if err != nil {
		return err
	}
	live := a.live
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil {
			a.mu.Lock()
			a.lastSeq = max(a.lastSeq, md.Sequence.Stream)
			a.mu.Unlock()
		}
		select {
		case a.msgs <- m:
		case <-live.Done():
		}
	})
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.stopCons, a.lastMsg = cc.Stop, time.Now()
	a.mu.Unlock()
	return nil
}

// quiet reports whether the attempt's events went quiet for
// refollowAfter while serve is connected.
func (a *waiting) quiet() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.d.o.NC.IsConnected() && time.Since(a.lastMsg) > refollowAfter
}

// mayTake reports whether worker's enrollment allows the attempt's pool.
func (a *waiting) mayTake(worker string) bool {
	e := a.d.o.Registry.Get(worker)
	return e != nil && e.Grant().Allows(poolOf(a.spec))
}

// poolOf is the pool an attempt runs in.
func poolOf(spec *record.AttemptSpec) string {
	if spec.Pool == "" {
		return config.DefaultPool
	}
	return spec.Pool
}

// refuseClaim undoes a claim by a worker whose join token does not allow
// the attempt's pool (any worker can write the claims bucket): it is
// recorded as fenced, the claim goes (only that revision: a rightful
// claim made since stays) and the work is offered again, since a
// rightful worker that met the claim dropped its message.
func (a *waiting) refuseClaim(worker string, tok uint64) {
	ctx := context.WithoutCancel(a.ctx)
	why := fmt.Sprintf("worker %s may not take pool %s (its join token does not allow it)", worker, a.spec.Pool)
	a.d.recordFenced(cluster.Result{Attempt: a.spec.ID, Worker: worker, Token: tok}, why)
	a.job.Emit(record.EvClusterFenced, map[string]any{"worker": worker, "token": tok, "error": why})
	if a.d.o.H.RevokeToken(ctx, poolOf(a.spec), a.spec.ID, tok) != nil || a.work == nil {
		return
	}
	a.d.dropWork(ctx, a.workSeq)
	if ack, err := a.d.o.H.JS.Publish(ctx, cluster.WorkSubject(a.spec.Pool), a.work); err == nil {
		a.workSeq = ack.Sequence
	}
}

// begin registers the attempt and reads its events and results from the
// stream after sequence from (0: all), and its requests.
func (d *Dispatcher) begin(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, from uint64) (*waiting, record.RemoteResult, bool) {
	key := cluster.Key(spec.ID)
	a := &waiting{d: d, ctx: ctx, spec: spec, job: job, key: key, msgs: make(chan jetstream.Msg, 256),
		secrets: make(chan *nats.Msg, 4), bundles: make(chan *nats.Msg, 4)}
	d.mu.Lock()
	d.active[key] = true
	delete(d.kept, key)
	d.mu.Unlock()
	a.stop = append(a.stop, func() {
		d.mu.Lock()
		delete(d.active, key)
		d.mu.Unlock()
		_ = d.o.H.DeleteObjects(context.WithoutCancel(ctx), poolOf(spec), spec.ID)
	})
	fail := func(err error) (*waiting, record.RemoteResult, bool) {
		a.end()
		return nil, record.RemoteResult{Message: err.Error()}, false
	}
	var err error
	if a.tmp, err = os.MkdirTemp("", "kusaw-dispatch-"); err != nil {
		return fail(err)
	}
	tmp := a.tmp
	a.stop = append(a.stop, func() { os.RemoveAll(tmp) })
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{cluster.EventsSubject(key, cluster.AnyWorker), cluster.ResultSubject(key, cluster.AnyWorker)}}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	// Messages are read until the wait ends, past a cancel: the worker's
	// report of a canceled attempt comes after it.
	live, stopLive := context.WithCancel(context.WithoutCancel(ctx))
	a.stop = append(a.stop, stopLive)
	a.cfg, a.live, a.lastSeq = cfg, live, from
	if err := untilNATS(ctx, a.follow); err != nil {
		return fail(fmt.Errorf("cannot follow the attempt's events: %v", err))
	}
	a.stop = append(a.stop, func() {
		a.mu.Lock()
		stop := a.stopCons
		a.mu.Unlock()
		if stop != nil {
			stop()
		}
	})
	for subj, ch := range map[string]chan *nats.Msg{cluster.SecretsSubject(key, cluster.AnyWorker): a.secrets, cluster.BundleSubject(key, cluster.AnyWorker): a.bundles} {
		s, err := d.o.NC.ChanSubscribe(subj, ch)
		if err != nil {
			return fail(err)
		}
		a.stop = append(a.stop, func() { _ = s.Unsubscribe() })
	}
	return a, record.RemoteResult{}, true
}

// end undoes begin, last first.
func (a *waiting) end() {
	if a.queued && !a.claimed {
		a.d.o.Metrics.queued(a.spec.Pool, -1)
	}
	for i := len(a.stop) - 1; i >= 0; i-- {
		a.stop[i]()
	}
}

// pin makes the first claim serve sees the attempt's holder until it
// ends. Any worker can write the claims bucket, so a later change there
// never makes another worker the holder: serve alone ends a claim
// (Revoke), and the attempt is then over. Who sent a message is its
// subject's.
func (a *waiting) pin(c cluster.Claim, tok uint64) {
	a.holder, a.token = c, tok
	if a.queued && !a.claimed {
		a.d.o.Metrics.queued(a.spec.Pool, -1)
	}
	a.claimed = true
	a.job.Emit(record.EvClusterClaimed, map[string]any{"worker": c.Worker, "token": tok})
	if a.job.Claimed != nil {
		a.job.Claimed(c.Worker, tok)
	}
}

// stale reports whether a message from worker with tok is not the
// holder's (pinning the holder on its first message).
func (a *waiting) stale(worker string, tok uint64) bool {
	if a.token != 0 {
		return worker != a.holder.Worker || tok != a.token
	}
	// The claim is read through a leader election or a short outage:
	// a read that fails for it would fence the holder itself (its
	// secrets refused, its events and result dropped). Past fenceWait
	// it fails closed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), fenceWait)
	defer cancel()
	var c cluster.Claim
	var cur uint64
	err := untilNATS(ctx, func() (err error) {
		try, done := context.WithTimeout(ctx, 3*time.Second)
		defer done()
		c, cur, err = a.d.o.H.Holder(try, poolOf(a.spec), a.spec.ID)
		return err
	})
	if err != nil || cur == 0 || cur != tok || c.Worker != worker {
		return true
	}
	if !a.mayTake(worker) {
		a.refuseClaim(worker, tok)
		return true
	}
	a.pin(cluster.Claim{Worker: worker, Attempt: a.spec.ID, At: time.Now()}, tok)
	return false
}

// wait follows the attempt until its holder reports, is lost, or the
// attempt is canceled.
func (a *waiting) wait() record.RemoteResult {
	d, ctx, spec, job := a.d, a.ctx, a.spec, a.job
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var giveUp <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case <-done:
			// Tell the worker, then give it a while to report.
			done = nil
			giveUp = time.After(cancelWait)
			_ = d.o.NC.Publish(cluster.CancelSubject(a.key), nil)
		case <-giveUp:
			_ = d.o.H.Revoke(context.WithoutCancel(ctx), poolOf(spec), spec.ID)
			return record.RemoteResult{Worker: a.holder.Worker, Token: a.token, Message: "canceled; the worker did not report"}
		case m := <-a.secrets:
			d.answerSecrets(ctx, m, spec, job, a.stale)
		case m := <-a.bundles:
			d.answerBundle(ctx, m, spec, job, a.tmp, a.stale)
		case m := <-a.msgs:
			a.mu.Lock()
			a.lastMsg = time.Now()
			a.mu.Unlock()
			if strings.HasPrefix(m.Subject(), cluster.ResultSubject(a.key, "")) {
				if res, ok := a.result(m); ok {
					return res
				}
				continue
			}
			a.event(m)
		case <-tick.C:
			if a.quiet() {
				if err := a.follow(); err != nil {
					a.mu.Lock()
					a.lastMsg = time.Now() // try again in a while
					a.mu.Unlock()
				}
			}
			if a.token == 0 {
				c, tok, err := d.o.H.Holder(ctx, poolOf(spec), spec.ID)
				if err != nil || tok == 0 {
					continue
				}
				if !a.mayTake(c.Worker) {
					a.refuseClaim(c.Worker, tok)
					continue
				}
				a.pin(c, tok)
			}
			if !d.alive(a.holder.Worker, a.holder.At) {
				_ = d.o.H.Revoke(context.WithoutCancel(ctx), poolOf(spec), spec.ID)
				d.o.Metrics.lost()
				msg := fmt.Sprintf("worker %s stopped answering for more than %s", a.holder.Worker, d.o.LostAfter)
				if d.o.Registry != nil && d.o.Registry.Get(a.holder.Worker) == nil {
					msg = fmt.Sprintf("worker %s was retired (kusaw workers retire)", a.holder.Worker)
				}
				job.Emit(record.EvClusterLost, map[string]any{"worker": a.holder.Worker, "token": a.token})
				return record.RemoteResult{Lost: true, Worker: a.holder.Worker, Token: a.token, Message: msg}
			}
		}
	}
}

// event writes one of the holder's events into serve's sealed record,
// with its place in the stream (a re-attaching serve goes on after it).
func (a *waiting) event(m jetstream.Msg) {
	var ev cluster.Event
	if json.Unmarshal(m.Data(), &ev) != nil || ev.Attempt != a.spec.ID || ev.Worker != cluster.SenderOf(m.Subject()) {
		return
	}
	if a.stale(ev.Worker, ev.Token) {
		return // a stale holder's event: never written
	}
	var streamSeq uint64
	if meta, err := m.Metadata(); err == nil {
		streamSeq = meta.Sequence.Stream
	}
	if !a.fromWorker(ev, streamSeq) {
		return // serve writes its own, about its own branches and verdicts
	}
	if ev.Type == record.EvProcessStarted && !a.started && !a.published.IsZero() {
		a.started = true
		a.d.o.Metrics.latency(time.Since(a.published))
	}
	data := ev.Data
	if data == nil {
		data = map[string]any{}
	}
	data["worker"] = ev.Worker
	if streamSeq > 0 {
		data["stream_seq"] = streamSeq
	}
	a.job.Emit(ev.Type, data)
}

// result takes the holder's result (ok) or records a stale one as fenced.
func (a *waiting) result(m jetstream.Msg) (record.RemoteResult, bool) {
	var r cluster.Result
	if json.Unmarshal(m.Data(), &r) != nil || r.Attempt != a.spec.ID || r.Worker != cluster.SenderOf(m.Subject()) {
		return record.RemoteResult{}, false
	}
	if a.stale(r.Worker, r.Token) {
		why := "stale fencing token"
		if !a.mayTake(r.Worker) {
			why = fmt.Sprintf("worker %s may not take pool %s", r.Worker, a.spec.Pool)
		}
		a.d.recordFenced(r, why)
		a.job.Emit(record.EvClusterFenced, map[string]any{"worker": r.Worker, "token": r.Token})
		return record.RemoteResult{}, false
	}
	ctx := context.WithoutCancel(a.ctx)
	if r.HandedBack != "" {
		// A draining or stopping worker gave it back unfinished: lost,
		// so the engine dispatches it again without counting it.
		_ = a.d.o.H.Revoke(ctx, poolOf(a.spec), a.spec.ID)
		a.d.o.Metrics.lost()
		a.job.Emit(record.EvClusterLost, map[string]any{"worker": r.Worker, "token": r.Token, "handed_back": r.HandedBack})
		return record.RemoteResult{Lost: true, Worker: r.Worker, Token: r.Token, Message: "handed back: " + r.HandedBack}, true
	}
	res := a.d.accept(ctx, a.spec, a.job, r, a.tmp)
	_ = a.d.o.H.Revoke(ctx, poolOf(a.spec), a.spec.ID)
	return res, true
}

// answerSecrets seals the attempt's secrets to the current holder's curve
// key; anyone else gets nothing.
func (d *Dispatcher) answerSecrets(ctx context.Context, m *nats.Msg, spec *record.AttemptSpec, job record.RemoteJob, stale func(string, uint64) bool) {
	reply := func(r cluster.SecretsReply) {
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	}
	var req cluster.SecretsRequest
	if json.Unmarshal(m.Data, &req) != nil || req.Attempt != spec.ID || req.Worker != cluster.SenderOf(m.Subject) || stale(req.Worker, req.Token) {
		reply(cluster.SecretsReply{Error: "not the attempt's holder"})
		return
	}
	w := d.o.Registry.Get(req.Worker)
	if w == nil {
		reply(cluster.SecretsReply{Error: "not enrolled"})
		return
	}
	vals := map[string]string{}
	for _, k := range spec.Secrets {
		if v, err := job.Secret(k); err == nil {
			vals[k] = v
		}
	}
	b, _ := json.Marshal(vals)
	sealed, err := d.o.Identity.Seal(b, w.XKey)
	clear(b)
	if err != nil {
		reply(cluster.SecretsReply{Error: err.Error()})
		return
	}
	reply(cluster.SecretsReply{Sealed: sealed})
}

// accept imports a current holder's result: bundles re-hashed into serve's
// repositories (their tips must be the heads the worker names), logs and
// artifacts into the attempt's folder, the egress log checked against the
// worker's enrolled key.
func (d *Dispatcher) accept(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, r cluster.Result, tmp string) record.RemoteResult {
	out := record.RemoteResult{Worker: r.Worker, Token: r.Token, Heads: map[string]string{}}
	if r.Error != "" {
		out.Message = "worker " + r.Worker + ": " + r.Error
		return out
	}
	var rec record.AttemptRecord
	if err := json.Unmarshal(r.Record, &rec); err != nil {
		out.Message = "worker " + r.Worker + " sent a bad attempt record"
		return out
	}
	for _, sr := range spec.Repos {
		head := r.Heads[sr.Name]
		obj := r.Bundles[sr.Name]
		if head == "" || head == sr.Base || obj == "" {
			if head == sr.Base {
				out.Heads[sr.Name] = head
			}
			continue
		}
		if err := ownObject(spec, r, obj); err != nil {
			out.Message = err.Error()
			return out
		}
		p := filepath.Join(tmp, "out-"+sr.Name+".bundle")
		n, err := d.fetchChecked(ctx, r, obj, p)
		if err == nil {
			d.o.Metrics.bundle("in", n)
			var tip string
			tip, err = cluster.ImportBundle(ctx, job.Repos[sr.Name], p)
			if err == nil && tip != head {
				err = fmt.Errorf("the bundle carries %s, not %s", tip, head)
			}
		}
		if err != nil {
			job.Emit(record.EvCommitted, map[string]any{"repo": sr.Name, "error": err.Error(), "worker": r.Worker})
			out.Message = fmt.Sprintf("repo %s: the worker's commits were refused: %v", sr.Name, err)
			return out
		}
		out.Heads[sr.Name] = head
	}
	// The files come down at once: each object is a few round trips.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var refused error // the egress log's: it fails the attempt
	for name, obj := range r.Files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.fetchFile(ctx, spec, job, r, tmp, name, obj); err != nil {
				mu.Lock()
				refused = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := d.egressVerdict(spec, job, r, refused); err != nil {
		out.Message = err.Error()
		return out // no record: the attempt fails and no branch moves
	}
	out.Record = &rec
	return out
}

// isBase reports whether n is its repo's base commit in spec.
func isBase(spec *record.AttemptSpec, n record.SpecNeed) bool {
	for _, r := range spec.Repos {
		if r.Name == n.Repo {
			return r.Base == n.Commit
		}
	}
	return false
}

// putBundle stores a bundle of commit n against have and returns the
// object's name.
func (d *Dispatcher) putBundle(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, n record.SpecNeed, have []string, prefix string) (string, error) {
	p, release, err := d.bundles.get(ctx, job.Repos[n.Repo], n.Commit, have)
	if err != nil {
		return "", fmt.Errorf("repo %s: %v", n.Repo, err)
	}
	defer release()
	name := cluster.ObjectName(poolOf(spec), spec.ID, 0, prefix+n.Repo+".bundle")
	var size int64
	err = untilNATS(ctx, func() (err error) {
		size, err = d.o.H.PutFile(ctx, name, p)
		return err
	})
	if errors.Is(err, cluster.ErrObjectExists) {
		// Serve's own, from an earlier request of the same commit: only
		// serve writes its names, and a stored object is whole.
		return name, nil
	}
	if err != nil {
		return "", fmt.Errorf("repo %s: cannot store its bundle: %v", n.Repo, err)
	}
	d.o.Metrics.bundle("out", size)
	job.Emit(record.EvClusterBundle, map[string]any{"repo": n.Repo, "commit": n.Commit, "bytes": size, "against": len(have), "full": len(have) == 0})
	return name, nil
}

// held is what every live worker offering pool holds of repo: a bundle
// against it needs nothing any of them lacks. Empty when one holds none.
func (d *Dispatcher) held(pool, repo string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var common map[string]bool
	for name, hb := range d.hb {
		if time.Since(d.seen[name]) > d.o.LostAfter || !slices.Contains(hb.Pools, pool) {
			continue
		}
		// A worker that may not take the pool says nothing about what
		// the pool's workers hold, whatever its heartbeat claims.
		if e := d.o.Registry.Get(name); e == nil || !e.Grant().Allows(pool) {
			continue
		}
		mine := map[string]bool{}
		for _, c := range hb.Have[repo] {
			mine[c] = true
		}
		if common == nil {
			common = mine
			continue
		}
		for c := range common {
			if !mine[c] {
				delete(common, c)
			}
		}
	}
	var out []string
	for c := range common {
		out = append(out, c)
	}
	return out
}

// answerBundle gives the attempt's holder a full bundle of a repo's base:
// its cache lacked what the incremental one needed.
func (d *Dispatcher) answerBundle(ctx context.Context, m *nats.Msg, spec *record.AttemptSpec, job record.RemoteJob, tmp string, stale func(string, uint64) bool) {
	reply := func(r cluster.BundleReply) {
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	}
	var req cluster.BundleRequest
	if json.Unmarshal(m.Data, &req) != nil || req.Attempt != spec.ID || req.Worker != cluster.SenderOf(m.Subject) || stale(req.Worker, req.Token) {
		reply(cluster.BundleReply{Error: "not the attempt's holder"})
		return
	}
	// Only a commit the attempt reads: the base when none is named.
	for _, n := range spec.Needs() {
		if n.Repo != req.Repo || !(n.Commit == req.Commit || req.Commit == "" && isBase(spec, n)) {
			continue
		}
		prefix := "full-"
		if !isBase(spec, n) {
			prefix = "full-" + n.Commit + "-"
		}
		name, err := d.putBundle(ctx, spec, job, n, nil, prefix)
		if err != nil {
			reply(cluster.BundleReply{Error: err.Error()})
			return
		}
		reply(cluster.BundleReply{Object: name})
		return
	}
	reply(cluster.BundleReply{Error: "no commit " + req.Commit + " of repo " + req.Repo + " in the attempt"})
}

// fetchFile brings one of a result's files into the attempt's folder: the
// artifacts' tar unpacked inside artifacts/, a log under its own name. It
// returns an error only for an egress log that is refused.
func (d *Dispatcher) fetchFile(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, r cluster.Result, tmp, name, obj string) error {
	if name == record.EgressLogFile {
		return d.takeEgress(ctx, spec, job, r, obj)
	}
	refused := func(err error) {
		job.Emit(record.EvClusterObjectRefused, map[string]any{"worker": r.Worker, "object": obj, "file": name, "error": err.Error()})
	}
	if err := ownObject(spec, r, obj); err != nil {
		refused(err)
		return nil
	}
	if name == cluster.ArtifactsTar {
		p := filepath.Join(tmp, name)
		if _, err := d.fetchChecked(ctx, r, obj, p); err != nil {
			refused(err)
			return nil
		}
		f, err := os.Open(p)
		if err == nil {
			err = cluster.Untar(f, filepath.Join(job.Dir, record.ArtifactsDir), maxArtifacts)
			f.Close()
		}
		if err != nil {
			job.Emit(record.EvClusterArtifactsRefused, map[string]any{"worker": r.Worker, "error": err.Error()})
		}
		return nil
	}
	if !record.ResultFile(name, specRepos(spec)) {
		refused(fmt.Errorf("%q is not a file a result may carry (its logs, its events, the egress log and artifacts)", name))
		return nil
	}
	// Beside its place, and there only once its digest matched.
	dst := filepath.Join(job.Dir, name)
	if _, err := d.fetchChecked(ctx, r, obj, dst+".part"); err != nil {
		refused(err)
		return nil
	}
	if err := placeNew(dst+".part", dst); err != nil {
		refused(err)
		return nil
	}
	return nil
}

// specRepos are the names of an attempt's repos.
func specRepos(spec *record.AttemptSpec) []string {
	var out []string
	for _, r := range spec.Repos {
		out = append(out, r.Name)
	}
	return out
}

// placeNew moves a fetched file to its place in the attempt's folder, and
// only where nothing is yet: a link fails on an existing name where a
// rename would replace it, so no object of a worker ever takes the place
// of a file serve wrote. The file ends readable (0644) like serve's own.
func placeNew(part, dst string) error {
	defer os.Remove(part)
	if err := os.Chmod(part, 0o644); err != nil {
		return err
	}
	if err := os.Link(part, dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s is in the attempt's folder already: a worker's file never replaces one", filepath.Base(dst))
		}
		return err
	}
	return nil
}

// untilNATS runs f until it succeeds, fails for good, or ctx ends. It
// tries again while the error is one a NATS outage or a JetStream leader
// election gives (no answer in time, no responders, the stream
// temporarily unavailable): those pass, and failing the attempt for them
// would fail a run for the infrastructure's moment.
func untilNATS(ctx context.Context, f func() error) error {
	wait := 250 * time.Millisecond
	for {
		err := f()
		if err == nil || !transientNATS(ctx, err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// transientNATS tells the errors that pass by themselves once NATS has a
// connection and the stream a leader again.
func transientNATS(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var api *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return true
	case errors.As(err, &api):
		return api.Code == 503 // JetStream system temporarily unavailable
	}
	return false
}
