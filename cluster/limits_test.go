package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// workerConn is an enrolled worker's connection (a token allowing g) and
// its handles.
func workerConn(t *testing.T, s *Server, name string, g Grant, opts ...nats.Option) (*nats.Conn, *Handles) {
	t.Helper()
	id := joinedFor(t, s, name, g)
	nc, err := Dial(id, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := Open(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, h
}

// streamState reads a stream's state as serve sees it.
func streamState(t *testing.T, h *Handles, name string) jetstream.StreamState {
	t.Helper()
	st, err := h.JS.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// Attacker's side: a worker tries to fill serve's disk through what it
// may write. The events stream, past its byte limit, drops its oldest
// events and keeps taking new ones (serve has written the old ones into
// its records already); its pool's object store refuses an upload that
// does not fit with a clear error, and what of it got in goes when serve
// frees the attempt's objects; its pool's claims take junk keys only up
// to their limit, and no claim, heartbeat or event larger than its limit.
// The twin: uploads that fit are stored, once serve frees objects the
// room is there again, and another pool's claims and objects are not
// touched by the junk: its worker claims and stores as before.
func TestStoreLimits(t *testing.T) {
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	nc, err := s.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const evLimit, objLimit, claimLimit = 64 << 10, 1 << 20, 64 << 10
	h, err := SetupWith(ctx, nc, SetupOptions{EventsMaxBytes: evLimit, ObjectsMaxBytes: objLimit, ClaimsMaxBytes: claimLimit})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsurePool(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	wnc, wh := workerConn(t, s, "w", Grant{})

	// Events: 4 times the limit, each publish acknowledged.
	line := bytes.Repeat([]byte("e"), 1024)
	for i := range 256 {
		if _, err := wh.JS.Publish(ctx, EventsSubject(Key(fmt.Sprintf("r/s/%d", i)), "w"), line); err != nil {
			t.Fatalf("event %d refused: %v", i, err)
		}
	}
	st := streamState(t, h, EventsStream)
	if st.Bytes > evLimit || st.FirstSeq <= 1 || st.LastSeq != 256 {
		t.Fatalf("events stream after 256 KiB: %+v (limit %d)", st, evLimit)
	}
	if _, err := wh.JS.Publish(ctx, EventsSubject(Key("r/s/1"), "w"), make([]byte, EventMaxSize+1)); err == nil {
		t.Errorf("an event of %d bytes was taken (limit %d)", EventMaxSize+1, EventMaxSize)
	}

	// Objects.
	dir := t.TempDir()
	file := func(name string, n int) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, bytes.Repeat([]byte(name[:1]), n), 0o600)
		return p
	}
	objects := ObjectsStream("default")
	_, _, err = wh.PutFileSum(ctx, ObjectName("default", "r/s/1", 1, "big"), file("big", objLimit+300<<10))
	if !errors.Is(err, ErrObjectsFull) || !strings.Contains(err.Error(), objects) {
		t.Fatalf("an upload past the limit: %v", err)
	}
	t.Logf("refused: %v", err)
	if n := streamState(t, h, objects).Bytes; n > objLimit {
		t.Fatalf("the object store holds %d bytes, past its limit %d", n, objLimit)
	}
	// serve frees the attempt's objects, and what a refused upload left.
	if err := h.DeleteObjects(ctx, "default", "r/s/1"); err != nil {
		t.Fatal(err)
	}
	if n := streamState(t, h, objects).Msgs; n != 0 {
		t.Fatalf("%d messages of a refused upload stayed after serve freed the attempt's objects", n)
	}
	for _, n := range []string{"a", "b"} {
		if _, _, err := wh.PutFileSum(ctx, ObjectName("default", "r/s/1", 1, n), file(n, 400<<10)); err != nil {
			t.Fatalf("an upload that fits: %v", err)
		}
	}
	if _, _, err := wh.PutFileSum(ctx, ObjectName("default", "r/s/2", 1, "c"), file("c", 400<<10)); !errors.Is(err, ErrObjectsFull) {
		t.Fatalf("a third upload past the limit: %v", err)
	}
	if err := h.DeleteObjects(ctx, "default", "r/s/1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wh.PutFileSum(ctx, ObjectName("default", "r/s/3", 1, "c"), file("c", 400<<10)); err != nil {
		t.Fatalf("an upload after serve freed room: %v", err)
	}

	// Claims: junk keys until the stream refuses them.
	junk := 0
	for ; junk < 10000; junk++ {
		if _, err := wh.Claim(ctx, "default", fmt.Sprintf("junk/%d/%s", junk, strings.Repeat("j", 100)), "w"); err != nil {
			if errors.Is(err, ErrClaimed) {
				t.Fatalf("junk claim %d: %v", junk, err)
			}
			t.Logf("junk claim %d refused: %v", junk, err)
			break
		}
	}
	if junk == 10000 {
		t.Fatal("10000 junk claims taken")
	}
	if n := streamState(t, h, ClaimsStream("default")).Bytes; n > claimLimit {
		t.Fatalf("the claims hold %d bytes, past their limit %d", n, claimLimit)
	}
	big := []byte(`{"worker":"w","attempt":"x","junk":"` + strings.Repeat("j", ClaimMaxSize) + `"}`)
	if _, err := wh.JS.Publish(ctx, claimSubject("default", "r/s/9"), big); err == nil {
		t.Error("a claim of more than 1 KiB was taken")
	}
	if _, err := wh.Workers.Put(ctx, "w", make([]byte, HeartbeatMaxSize+1)); err == nil {
		t.Error("a heartbeat past its limit was taken")
	}

	// The twin: another pool's worker claims and stores, and this worker's
	// own heartbeat goes in.
	_, oh := workerConn(t, s, "o", Grant{Pools: []string{"other"}})
	if tok, err := oh.Claim(ctx, "other", "r/s/1", "o"); err != nil || tok == 0 {
		t.Fatalf("pool other's worker cannot claim after junk in pool default: %v", err)
	}
	if _, _, err := oh.PutFileSum(ctx, ObjectName("other", "r/s/1", 5, "a"), file("a", 400<<10)); err != nil {
		t.Fatalf("pool other's worker cannot store: %v", err)
	}
	if _, err := wh.Workers.Put(ctx, "w", []byte(`{"name":"w"}`)); err != nil {
		t.Fatalf("a heartbeat: %v", err)
	}
	_ = wnc
}

// Every stream, bucket and object store says how much it holds and how
// large one message may be, and none allows a roll-up; those no worker
// needs removed also deny deletes and purges to everyone. The embedded
// server's account refuses a stream that does not say how much it holds.
func TestStreamConfigs(t *testing.T) {
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _ := s.ConnectInProcess("serve")
	defer nc.Close()
	h, err := Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	names := h.JS.StreamNames(ctx)
	seen := 0
	for name := range names.Name() {
		seen++
		st, err := h.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		if c.MaxBytes <= 0 || c.MaxMsgSize <= 0 || c.AllowRollup {
			t.Errorf("%s: max_bytes %d, max_msg_size %d, allow_rollup %v", name, c.MaxBytes, c.MaxMsgSize, c.AllowRollup)
		}
		worker := strings.HasPrefix(name, claimsStreamPre) || strings.HasPrefix(name, objectsStreamPre)
		switch {
		case name == WorkStream:
		case worker:
			if !c.DenyDelete || c.MaxMsgsPerSubject != 1 || !c.DiscardNewPerSubject {
				t.Errorf("%s: deny_delete %v, max_msgs_per_subject %d, discard_new_per_subject %v", name, c.DenyDelete, c.MaxMsgsPerSubject, c.DiscardNewPerSubject)
			}
		default:
			if !c.DenyDelete || !c.DenyPurge {
				t.Errorf("%s: deny_delete %v, deny_purge %v", name, c.DenyDelete, c.DenyPurge)
			}
		}
	}
	if seen != 5 {
		t.Errorf("%d streams, want 5 (work, events, heartbeats, pool default's claims and objects)", seen)
	}
	if _, err := h.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "UNBOUNDED", Subjects: []string{"x.>"}}); err == nil {
		t.Error("the account took a stream without max_bytes")
	}
	if _, err := h.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "HUGE", Subjects: []string{"y.>"}, MaxBytes: AccountMaxStore + 1}); err == nil {
		t.Error("the account took a stream larger than its store")
	}
}

// Attacker's side: a roll-up is a publish header that empties a subject
// or a whole stream, and a permission cannot look at headers. A worker
// publishes with Nats-Rollup: all (and sub) on every subject it may write:
// a claim, an object's chunk and description, its heartbeat, an event.
// Each is refused by the stream and nothing is lost: serve's bundle,
// another worker's claim and object, the heartbeats and the events are
// all still there. The twin: the same worker's plain publishes go in.
func TestNoRollup(t *testing.T) {
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, _ := s.ConnectInProcess("serve")
	defer nc.Close()
	h, err := Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.PutBytes(ctx, ObjectName("default", "r/s/1", 0, "in-app.bundle"), []byte("serve's bundle")); err != nil {
		t.Fatal(err)
	}
	_, vh := workerConn(t, s, "victim", Grant{})
	if _, err := vh.Claim(ctx, "default", "r/s/1", "victim"); err != nil {
		t.Fatal(err)
	}
	if _, err := vh.PutBytes(ctx, ObjectName("default", "r/s/1", 1, "stdout.log"), []byte("victim's output")); err != nil {
		t.Fatal(err)
	}
	if _, err := vh.Workers.Put(ctx, "victim", []byte(`{"name":"victim"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := vh.JS.Publish(ctx, EventsSubject(Key("r/s/1"), "victim"), []byte(`{"type":"output"}`)); err != nil {
		t.Fatal(err)
	}
	streams := []string{ClaimsStream("default"), ObjectsStream("default"), "KV_" + WorkersBucket, EventsStream}
	before := map[string]uint64{}
	for _, st := range streams {
		before[st] = streamState(t, h, st).Msgs
	}

	_, mh := workerConn(t, s, "mallory", Grant{})
	o, _ := parseObject(ObjectName("default", "r/s/2", 1, "x"))
	for _, subj := range []string{claimSubject("default", "r/s/2"), o.chunk("abc", 0), o.meta(), "$KV." + WorkersBucket + ".mallory", EventsSubject(Key("r/s/2"), "mallory")} {
		for _, kind := range []string{"all", "sub"} {
			m := nats.NewMsg(subj)
			m.Header.Set("Nats-Rollup", kind)
			m.Data = []byte(`{"worker":"mallory"}`)
			if _, err := mh.JS.PublishMsg(ctx, m); err == nil {
				t.Errorf("%s: a roll-up (%s) was taken", subj, kind)
			} else if !strings.Contains(err.Error(), "rollup") {
				t.Errorf("%s: a roll-up (%s) refused, but not as one: %v", subj, kind, err)
			}
		}
	}
	for _, st := range streams {
		if n := streamState(t, h, st).Msgs; n != before[st] {
			t.Errorf("%s holds %d messages after the roll-ups, %d before", st, n, before[st])
		}
	}
	if b, err := vh.GetBytes(ctx, ObjectName("default", "r/s/1", 0, "in-app.bundle")); err != nil || string(b) != "serve's bundle" {
		t.Errorf("serve's bundle after the roll-ups: %q %v", b, err)
	}
	if b, err := vh.GetBytes(ctx, ObjectName("default", "r/s/1", 1, "stdout.log")); err != nil || string(b) != "victim's output" {
		t.Errorf("the victim's object after the roll-ups: %q %v", b, err)
	}
	if c, tok, err := h.Holder(ctx, "default", "r/s/1"); err != nil || tok == 0 || c.Worker != "victim" {
		t.Errorf("the victim's claim after the roll-ups: %+v %d %v", c, tok, err)
	}

	// Nor can anyone write over what is there: a claim held, an object
	// stored.
	if _, err := mh.JS.Publish(ctx, claimSubject("default", "r/s/1"), []byte(`{"worker":"mallory","attempt":"r/s/1"}`)); err == nil {
		t.Error("mallory wrote over the victim's claim")
	}
	if _, err := mh.PutBytes(ctx, ObjectName("default", "r/s/1", 1, "stdout.log"), []byte("pwned")); !errors.Is(err, ErrObjectExists) {
		t.Errorf("mallory wrote over the victim's object: %v", err)
	}
	if b, _ := vh.GetBytes(ctx, ObjectName("default", "r/s/1", 1, "stdout.log")); string(b) != "victim's output" {
		t.Errorf("the victim's object is now %q", b)
	}
	// Nor store one under serve's names (token 0: the bundles serve
	// sends), which a worker's permissions do not let it write at all.
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	if _, err := mh.PutBytes(sctx, ObjectName("default", "r/s/3", 0, "in-app.bundle"), []byte("pwned")); err == nil {
		t.Error("mallory stored an object under serve's names")
	}
	scancel()

	// The twin.
	if _, err := mh.Claim(ctx, "default", "r/s/2", "mallory"); err != nil {
		t.Errorf("a plain claim: %v", err)
	}
	if _, err := mh.PutBytes(ctx, ObjectName("default", "r/s/2", 2, "stdout.log"), []byte("mine")); err != nil {
		t.Errorf("a plain upload: %v", err)
	}
	if _, err := mh.Workers.Put(ctx, "mallory", []byte(`{"name":"mallory"}`)); err != nil {
		t.Errorf("a plain heartbeat: %v", err)
	}
	if _, err := mh.JS.Publish(ctx, EventsSubject(Key("r/s/2"), "mallory"), []byte(`{}`)); err != nil {
		t.Errorf("a plain event: %v", err)
	}
}
