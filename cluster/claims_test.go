package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// One claim per attempt; after serve revokes it, the next claim's token is
// higher and the old token is fenced.
func TestClaimsFence(t *testing.T) {
	s := startTestServer(t)
	ctx := context.Background()
	a, b := joined(t, s, "a"), joined(t, s, "b")
	nca, err := Dial(a, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer nca.Close()
	ncb, err := Dial(b, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer ncb.Close()
	ha, _ := Open(ctx, nca)
	hb, _ := Open(ctx, ncb)
	const id = "r1/build/1"
	t1, err := ha.Claim(ctx, "default", id, "a")
	if err != nil || t1 == 0 {
		t.Fatalf("claim: %d %v", t1, err)
	}
	if _, err := hb.Claim(ctx, "default", id, "b"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("a second worker claimed a held attempt: %v", err)
	}
	if ha.Fenced(ctx, "default", id, "a", t1) {
		t.Fatal("the holder is fenced")
	}
	if ha.Fenced(ctx, "default", id, "b", t1) == false {
		t.Fatal("another worker with the holder's token is not fenced")
	}
	nc, _ := s.ConnectInProcess("serve")
	defer nc.Close()
	hs, _ := Open(ctx, nc)
	if err := hs.Revoke(ctx, "default", id); err != nil {
		t.Fatal(err)
	}
	t2, err := hb.Claim(ctx, "default", id, "b")
	if err != nil || t2 <= t1 {
		t.Fatalf("claim after revoke: %d (was %d) %v", t2, t1, err)
	}
	if !hs.Fenced(ctx, "default", id, "a", t1) {
		t.Fatal("the lost worker's late token is accepted")
	}
	if hs.Fenced(ctx, "default", id, "b", t2) {
		t.Fatal("the new holder is fenced")
	}
}

// A restarted serve (Setup again) starts from an empty work queue (work
// nobody claimed is run again as new attempts) but keeps claims and
// objects: attempts still running on workers are re-attached to, and
// dispatch.Settle ends the rest.
func TestSetupKeepsClaimsEmptiesQueue(t *testing.T) {
	s := startTestServer(t)
	ctx := context.Background()
	nc, _ := s.ConnectInProcess("serve")
	defer nc.Close()
	h, err := Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Claim(ctx, "default", "r/s/1", "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.PutBytes(ctx, ObjectName("default", "r/s/1", 0, "x"), []byte("old")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.JS.Publish(ctx, WorkSubject("default"), []byte("old work")); err != nil {
		t.Fatal(err)
	}
	// An earlier kusaw's stores for every pool at once.
	for _, name := range legacyStores {
		if _, err := h.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"legacy." + name}, MaxBytes: 1 << 20, MaxMsgSize: 1024}); err != nil {
			t.Fatal(err)
		}
	}
	h2, err := Setup(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range legacyStores {
		if _, err := h2.JS.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("an earlier kusaw's %s is still there: %v", name, err)
		}
	}
	if c, tok, _ := h2.Holder(ctx, "default", "r/s/1"); tok == 0 || c.Worker != "w" {
		t.Error("a claim did not survive serve's restart")
	}
	if _, err := h2.GetBytes(ctx, ObjectName("default", "r/s/1", 0, "x")); err != nil {
		t.Errorf("an object did not survive serve's restart: %v", err)
	}
	st, _ := h2.JS.Stream(ctx, WorkStream)
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("work left in the queue: %v %+v", err, info)
	}
}
