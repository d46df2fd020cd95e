package cluster

import (
	"context"
	"errors"
	"testing"
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
	t1, err := ha.Claim(ctx, id, "a")
	if err != nil || t1 == 0 {
		t.Fatalf("claim: %d %v", t1, err)
	}
	if _, err := hb.Claim(ctx, id, "b"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("a second worker claimed a held attempt: %v", err)
	}
	if ha.Fenced(ctx, id, "a", t1) {
		t.Fatal("the holder is fenced")
	}
	if ha.Fenced(ctx, id, "b", t1) == false {
		t.Fatal("another worker with the holder's token is not fenced")
	}
	nc, _ := s.ConnectInProcess("serve")
	defer nc.Close()
	hs, _ := Open(ctx, nc)
	if err := hs.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	t2, err := hb.Claim(ctx, id, "b")
	if err != nil || t2 <= t1 {
		t.Fatalf("claim after revoke: %d (was %d) %v", t2, t1, err)
	}
	if !hs.Fenced(ctx, id, "a", t1) {
		t.Fatal("the lost worker's late token is accepted")
	}
	if hs.Fenced(ctx, id, "b", t2) {
		t.Fatal("the new holder is fenced")
	}
}
