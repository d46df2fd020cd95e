package cluster

import (
	"errors"
	"testing"
	"time"
)

// A worker's direct get may reach a replica that has not applied an
// object serve already stored (nats-server answers direct gets on a
// follower from when it is 90% caught up). Modelled on one server: the
// worker asks for the bundle before it is there, and it appears 300 ms
// later, as on a lagging follower; the worker's read waits for it rather
// than failing the attempt with "no such object". The twin: an object
// that never comes still fails with ErrNoObject, once LagPatience is
// over; serve's read (from the leader) fails at once.
func TestWorkerReadWaitsForLaggingObject(t *testing.T) {
	s, ctx, sh := serveWithPool(t, "default")
	_, wh := workerConn(t, s, "w1", Grant{})
	bundle := ObjectName("default", "r1/s/1", 0, "in-app.bundle")
	big := make([]byte, 3*ObjectChunkSize+17) // several chunks
	for i := range big {
		big[i] = byte(i)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = sh.PutBytes(ctx, bundle, big)
	}()
	got, err := wh.GetBytes(ctx, bundle)
	if err != nil || len(got) != len(big) {
		t.Fatalf("the worker's read of an object stored 300 ms later: %d bytes, %v", len(got), err)
	}

	old := LagPatience
	LagPatience = 500 * time.Millisecond
	defer func() { LagPatience = old }()
	missing := ObjectName("default", "r1/s/1", 0, "in-other.bundle")
	start := time.Now()
	if _, err := wh.GetBytes(ctx, missing); !errors.Is(err, ErrNoObject) || time.Since(start) < LagPatience {
		t.Fatalf("the worker's read of an object that never comes: %v after %s", err, time.Since(start))
	}
	if _, err := sh.GetBytes(ctx, missing); !errors.Is(err, ErrNoObject) {
		t.Fatalf("serve's read of a missing object: %v", err)
	}
}
