package dispatch

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/record"
	"github.com/nats-io/nats.go"
)

// The attacker's side: an enrolled worker claims and stores under keys of
// attempts that never were, to hold its pool's claims and objects until
// serve restarts. Serve's sweep removes them while it runs. The twin: the
// claim and objects of an attempt serve waits for stay.
func TestSweepRemovesJunkClaims(t *testing.T) {
	e := enrollingServer(t)
	srv, nc, dir, ctx, h := e.srv, e.nc, e.dir, e.ctx, e.h
	// An enrolled worker of pool default, with a worker's permissions.
	tok, err := srv.NewToken("", cluster.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := cluster.ParseToken(tok.String())
	if err != nil {
		t.Fatal(err)
	}
	id, err := cluster.NewIdentity("mal")
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Enroll(ctx, parsed, id, "test", nil); err != nil {
		t.Fatal(err)
	}
	wnc, err := cluster.Dial(id, "mal")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	wh, err := cluster.Open(ctx, wnc)
	if err != nil {
		t.Fatal(err)
	}

	d, err := New(ctx, Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: dir, LostAfter: 5 * time.Second, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// An attempt serve waits for, claimed by the worker, with an object.
	spec := &record.AttemptSpec{ID: "r/s/1", Run: "r", Step: "s", Number: 1, Pool: "default"}
	a, _, ok := d.begin(ctx, spec, record.RemoteJob{Dir: t.TempDir(), Emit: func(string, map[string]any) {}}, 0)
	if !ok {
		t.Fatal("begin")
	}
	defer a.end()
	liveTok, err := wh.Claim(ctx, "default", spec.ID, "mal")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wh.PutBytes(ctx, cluster.ObjectName("default", spec.ID, liveTok, "stdout.log"), []byte("out")); err != nil {
		t.Fatal(err)
	}
	// Junk.
	for i := range 20 {
		jid := fmt.Sprintf("junk/%d/1", i)
		jt, err := wh.Claim(ctx, "default", jid, "mal")
		if err != nil {
			t.Fatalf("junk claim %d: %v", i, err)
		}
		if _, err := wh.PutBytes(ctx, cluster.ObjectName("default", jid, jt, "stdout.log"), []byte("junk")); err != nil {
			t.Fatalf("junk object %d: %v", i, err)
		}
	}
	if keys, _ := h.ClaimedKeys(ctx, "default"); len(keys) != 21 {
		t.Fatalf("%d claimed keys before the sweep, want 21", len(keys))
	}
	claims, objects := d.Sweep(ctx)
	if claims != 20 || objects != 20 {
		t.Errorf("the sweep removed %d claims and %d attempts' objects, want 20 and 20", claims, objects)
	}
	keys, _ := h.ClaimedKeys(ctx, "default")
	if len(keys) != 1 || keys[0] != cluster.Key(spec.ID) {
		t.Errorf("claims after the sweep: %v, want only %s", keys, cluster.Key(spec.ID))
	}
	if c, cur, _ := h.Holder(ctx, "default", spec.ID); cur != liveTok || c.Worker != "mal" {
		t.Errorf("the live attempt's claim changed: %+v %d", c, cur)
	}
	if _, err := h.GetBytes(ctx, cluster.ObjectName("default", spec.ID, liveTok, "stdout.log")); err != nil {
		t.Errorf("the live attempt's object went: %v", err)
	}
	if _, err := h.GetBytes(ctx, cluster.ObjectName("default", "junk/0/1", 0, "stdout.log")); err == nil {
		t.Error("a junk object survived")
	}
	if objs, _ := h.ObjectKeys(ctx, "default"); len(objs) != 1 {
		t.Errorf("objects after the sweep: %v", objs)
	}
}

// Before Settle said which claims a resumed run keeps, the sweep leaves
// every claim alone, and after it those it kept until their run has
// re-attached and ended.
func TestSweepWaitsForSettle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	srv, err := cluster.StartServer(cluster.ServerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := cluster.Setup(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Claim(ctx, "default", "r/s/9", "w1"); err != nil {
		t.Fatal(err)
	}
	d, err := New(ctx, Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: dir, LostAfter: 5 * time.Second, AwaitSettle: true, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := d.Sweep(ctx); c != 0 {
		t.Errorf("the sweep before Settle removed %d claims", c)
	}
	d.Settle(ctx, []string{"r/s/9"})
	if c, _ := d.Sweep(ctx); c != 0 {
		t.Errorf("the sweep removed the claim a resumed run keeps (%d)", c)
	}
	// Once that run re-attached and ended, what its attempt left goes.
	a, _, ok := d.begin(ctx, &record.AttemptSpec{ID: "r/s/9", Run: "r", Step: "s", Number: 9, Pool: "default"}, record.RemoteJob{Dir: t.TempDir(), Emit: func(string, map[string]any) {}}, 0)
	if !ok {
		t.Fatal("begin")
	}
	if c, _ := d.Sweep(ctx); c != 0 {
		t.Errorf("the sweep removed a re-attached attempt's claim (%d)", c)
	}
	a.end()
	if c, _ := d.Sweep(ctx); c != 1 {
		t.Errorf("the sweep left an ended attempt's claim (%d)", c)
	}
}

// An attempt's events consumer made again (after the stream went quiet:
// its server may be gone) goes on after the last message taken: nothing
// twice, nothing missed.
func TestRefollowNoDuplicates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	srv, err := cluster.StartServer(cluster.ServerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := cluster.Setup(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(ctx, Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: dir, LostAfter: 5 * time.Second, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	spec := &record.AttemptSpec{ID: "r/s/1", Run: "r", Step: "s", Number: 1, Pool: "default"}
	a, _, ok := d.begin(ctx, spec, record.RemoteJob{Dir: t.TempDir(), Emit: func(string, map[string]any) {}}, 0)
	if !ok {
		t.Fatal("begin")
	}
	defer a.end()
	pub := func(n int) {
		if _, err := h.JS.Publish(ctx, cluster.EventsSubject(a.key, "w1"), []byte(fmt.Sprint(n))); err != nil {
			t.Fatal(err)
		}
	}
	next := func() string {
		select {
		case m := <-a.msgs:
			return string(m.Data())
		case <-time.After(10 * time.Second):
			return "nothing"
		}
	}
	pub(1)
	pub(2)
	if got := next() + next(); got != "12" {
		t.Fatalf("first consumer: %q", got)
	}
	if err := a.follow(); err != nil {
		t.Fatal(err)
	}
	pub(3)
	if got := next(); got != "3" {
		t.Errorf("after following again: %q, want 3 (nothing twice)", got)
	}
	select {
	case m := <-a.msgs:
		t.Errorf("one more message: %q", m.Data())
	case <-time.After(500 * time.Millisecond):
	}
}

// The attacker's side, timed before the sweep can see it: an enrolled
// worker claims the key of an attempt serve is about to publish (attempt
// ids are a run's, a step's and a number: guessable), so that the worker
// that takes the work finds it claimed and the attempt is the attacker's
// or nobody's. A fresh attempt has no claim of right before its work is
// published: serve drops what it finds. The twin: a claim of a running
// attempt serve re-attaches to after a restart stays.
func TestPreclaimedAttemptFreed(t *testing.T) {
	e := enrollingServer(t)
	srv, nc, dir, ctx, h := e.srv, e.nc, e.dir, e.ctx, e.h
	worker := func(name string) *cluster.Handles {
		tok, _ := srv.NewToken("", cluster.Grant{})
		parsed, _ := cluster.ParseToken(tok.String())
		id, _ := cluster.NewIdentity(name)
		if err := cluster.Enroll(ctx, parsed, id, "test", nil); err != nil {
			t.Fatal(err)
		}
		wnc, err := cluster.Dial(id, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(wnc.Close)
		wh, err := cluster.Open(ctx, wnc)
		if err != nil {
			t.Fatal(err)
		}
		return wh
	}
	mal, good := worker("mal"), worker("good")
	d, err := New(ctx, Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: dir, LostAfter: 5 * time.Second, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	spec := &record.AttemptSpec{ID: "r/s/1", Run: "r", Step: "s", Number: 1, Pool: "default"}
	if _, err := mal.Claim(ctx, "default", spec.ID, "mal"); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(rctx, spec, record.RemoteJob{Dir: t.TempDir(), Emit: func(string, map[string]any) {}})
	}()
	defer func() { rcancel(); <-done }()
	st, err := h.JS.Stream(ctx, cluster.WorkStream)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if info, err := st.Info(ctx); err == nil && info.State.Msgs > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("serve did not publish the attempt")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := good.Claim(ctx, "default", spec.ID, "good"); err != nil {
		t.Fatalf("the worker that takes the published attempt cannot claim it: %v", err)
	}
	if c, _, _ := h.Holder(ctx, "default", spec.ID); c.Worker != "good" {
		t.Fatalf("the published attempt is held by %q", c.Worker)
	}

	// The twin: re-attaching keeps the claim its worker holds.
	rcancel()
	<-done
	spec2 := &record.AttemptSpec{ID: "r/s/2", Run: "r", Step: "s", Number: 2, Pool: "default"}
	tok2, err := good.Claim(ctx, "default", spec2.ID, "good")
	if err != nil {
		t.Fatal(err)
	}
	job := t.TempDir()
	r2, c2 := context.WithCancel(ctx)
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		d.Reattach(r2, spec2, record.RemoteJob{Dir: job, Emit: func(string, map[string]any) {}}, "good", tok2)
	}()
	time.Sleep(500 * time.Millisecond)
	if c, _, _ := h.Holder(ctx, "default", spec2.ID); c.Worker != "good" {
		t.Errorf("re-attaching dropped the running attempt's claim (held by %q)", c.Worker)
	}
	c2()
	<-done2
}

// enrolling is the embedded server with serve's connection taking
// enrollments and serve's handles set up: what an enrolled worker's
// attack needs on the other side. ctx ends with the test (a minute at
// most).
type enrolling struct {
	srv *cluster.Server
	nc  *nats.Conn
	dir string
	ctx context.Context
	h   *cluster.Handles
}

func enrollingServer(t *testing.T) enrolling {
	t.Helper()
	e := enrolling{dir: filepath.Join(t.TempDir(), "cluster")}
	var err error
	e.srv, err = cluster.StartServer(cluster.ServerOptions{Dir: e.dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srv.Shutdown)
	e.nc, err = e.srv.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	if err := e.srv.ServeEnrollments(ctx, e.nc); err != nil {
		t.Fatal(err)
	}
	if e.h, err = cluster.Setup(ctx, e.nc); err != nil {
		t.Fatal(err)
	}
	return e
}
