package cluster

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/natstest"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// plainServer is a NATS server without auth on loopback.
func plainServer(t *testing.T, o server.Options) *nats.Conn {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	if o.JetStream {
		o.StoreDir = t.TempDir()
	}
	ns, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server did not start")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// A server left at NATS's 1 MB max_payload, or without JetStream, is
// refused at serve's start with the setting to change; one set as kusaw
// needs passes.
func TestPreflightRefusesWhatWouldFailLater(t *testing.T) {
	ctx := context.Background()
	small := plainServer(t, server.Options{JetStream: true, MaxPayload: 1 << 20})
	if err := Preflight(ctx, small, 1); err == nil || !strings.Contains(err.Error(), "max_payload: 8MB") {
		t.Errorf("a 1 MB max_payload: %v", err)
	}
	noJS := plainServer(t, server.Options{MaxPayload: MaxPayload})
	defer func(w time.Duration) { jetStreamStartWait = w }(jetStreamStartWait)
	jetStreamStartWait = 500 * time.Millisecond
	if err := Preflight(ctx, noJS, 1); err == nil || !strings.Contains(err.Error(), "no JetStream") {
		t.Errorf("no JetStream: %v", err)
	}
	good := plainServer(t, server.Options{JetStream: true, MaxPayload: MaxPayload})
	if err := Preflight(ctx, good, 1); err != nil {
		t.Errorf("a server set as kusaw needs: %v", err)
	}
}

// An account whose JetStream disk storage is smaller than kusaw's streams
// take is refused, naming the limit; the default test account (no
// limit) passes.
func TestPreflightAccountStorage(t *testing.T) {
	c := natstest.StartWith(t, t.TempDir(), 1, func(ac *jwt.AccountClaims) {
		ac.Limits.JetStreamLimits.DiskStorage = 100 << 20
	})
	nc, err := testExternal(t, c.Account, c.SigningSeed, c.CAPEM, c.URL).Connect("preflight")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := Preflight(context.Background(), nc, 1); err == nil || !strings.Contains(err.Error(), "js-disk-storage") || !strings.Contains(err.Error(), "100.0 MiB") {
		t.Errorf("an account with 100 MiB of JetStream: %v", err)
	}
	ok := natstest.Start(t, t.TempDir())
	nc2, err := testExternal(t, ok.Account, ok.SigningSeed, ok.CAPEM, ok.URL).Connect("preflight")
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	if err := Preflight(context.Background(), nc2, 1); err != nil {
		t.Errorf("an account without limits: %v", err)
	}
}

// serve.cluster.ca naming another CA than the one the servers' certificates
// chain to: the error names the key to set.
func TestWrongCANamesTheKey(t *testing.T) {
	c := natstest.Start(t, t.TempDir())
	other := natstest.Start(t, t.TempDir())
	_, err := testExternal(t, c.Account, c.SigningSeed, other.CAPEM, c.URL).Connect("wrong-ca")
	if err == nil || !strings.Contains(err.Error(), "does not chain to serve.cluster.ca") {
		t.Fatalf("a wrong CA: %v", err)
	}
}

// A server that says JetStream is off in its first moments and then has
// it (here: one without JetStream replaced on the same port by one with
// it, the client reconnecting) passes serve's check; the refusal above is
// for a server that keeps saying so.
func TestPreflightWaitsForJetStreamToStart(t *testing.T) {
	o := server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, MaxPayload: MaxPayload}
	first, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go first.Start()
	if !first.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server did not start")
	}
	port := first.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(first.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	later := make(chan *server.Server, 1)
	go func() {
		time.Sleep(600 * time.Millisecond)
		first.Shutdown()
		first.WaitForShutdown()
		o2 := o
		o2.Port, o2.JetStream, o2.StoreDir = port, true, t.TempDir()
		s2, err := server.NewServer(&o2)
		if err != nil {
			later <- nil
			return
		}
		go s2.Start()
		later <- s2
	}()
	t.Cleanup(func() {
		if s2 := <-later; s2 != nil {
			s2.Shutdown()
			s2.WaitForShutdown()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Preflight(ctx, nc, 1); err != nil {
		t.Fatalf("a server whose JetStream starts late: %v", err)
	}
}
