package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func startTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := StartServer(ServerOptions{Dir: filepath.Join(t.TempDir(), "cluster"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, err := s.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.ServeEnrollments(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if _, err := Setup(ctx, nc); err != nil {
		t.Fatal(err)
	}
	return s
}

func joined(t *testing.T, s *Server, name string) *Identity {
	t.Helper()
	tok, err := s.NewToken("")
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseToken(tok.String())
	if err != nil {
		t.Fatal(err)
	}
	id, err := NewIdentity(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := Enroll(context.Background(), parsed, id, "test"); err != nil {
		t.Fatal(err)
	}
	return id
}

// A worker enrolls once with a token, then connects with its nkey alone
// and can use the cluster's buckets; the token does not work twice.
func TestEnrollThenConnect(t *testing.T) {
	s := startTestServer(t)
	tok, _ := s.NewToken("")
	id, _ := NewIdentity("w1")
	if err := Enroll(context.Background(), tok, id, "test"); err != nil {
		t.Fatal(err)
	}
	if id.Server != s.Addr() || id.CAPin != s.CA.Fingerprint() || id.ServeXKey != s.Identity.XKey() {
		t.Fatalf("identity after enroll: %+v", id)
	}
	dir := t.TempDir()
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, IdentityFile))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("identity mode %v", st.Mode())
	}
	id2, err := LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Dial(id2, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	h, err := Open(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Workers.Put(context.Background(), "w1", []byte("{}")); err != nil {
		t.Fatalf("a worker cannot write its own heartbeat: %v", err)
	}
	// The same token again: refused.
	other, _ := NewIdentity("w2")
	if err := Enroll(context.Background(), tok, other, "test"); err == nil {
		t.Fatal("a used token enrolled a second worker")
	}
}

// Attacker's side: a key serve never enrolled, a forged signature, no
// credentials, a guessed token secret and a client that does not check the
// CA are all kept out; a worker cannot publish work or write another
// worker's heartbeat.
func TestUnenrolledRefused(t *testing.T) {
	s := startTestServer(t)
	good := joined(t, s, "good")

	stranger, _ := NewIdentity("stranger")
	stranger.Server, stranger.CAPin = good.Server, good.CAPin
	if _, err := Dial(stranger, "stranger"); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("an unenrolled key connected: %v", err)
	}
	// A forger knows the enrolled public key but signs with its own.
	forge := func(nonce []byte) ([]byte, error) { return stranger.Sign(nonce) }
	if nc, err := nats.Connect(s.URL(), nats.Nkey(good.NKey(), forge), nats.Secure(PinnedTLS(good.CAPin))); err == nil {
		nc.Close()
		t.Fatal("a forged nonce signature was accepted")
	}
	if nc, err := nats.Connect(s.URL(), nats.Secure(PinnedTLS(good.CAPin))); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	}
	if nc, err := nats.Connect(s.URL(), nats.UserInfo(EnrollUser, strings.Repeat("A", 43)), nats.Secure(PinnedTLS(good.CAPin))); err == nil {
		nc.Close()
		t.Fatal("a guessed token secret connected")
	}
	// Another CA's pin: the worker refuses serve (someone in between).
	otherCA, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wrong := *good
	wrong.CAPin = otherCA.Fingerprint()
	if _, err := Dial(&wrong, "good"); err == nil || !strings.Contains(err.Error(), "pinned CA") {
		t.Fatalf("a worker accepted a server outside its pinned CA: %v", err)
	}
	// The legitimate twin connects; it may not queue work or pose as
	// another worker.
	nc, err := Dial(good, "good")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	errs := make(chan error, 4)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	_ = nc.Publish(WorkSubject("default"), []byte("forged work"))
	_ = nc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("unexpected error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a worker published to the work queue")
	}
	h, err := Open(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := h.Workers.Put(ctx, "someone-else", []byte("{}")); err == nil {
		t.Fatal("a worker wrote another worker's heartbeat")
	}
}

func TestTokenParse(t *testing.T) {
	for _, bad := range []string{"", "hello", TokenPrefix + "!!!", TokenPrefix + "e30"} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
}
