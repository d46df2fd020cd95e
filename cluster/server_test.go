package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kusaw/kusaw/cluster/enroll"
)

func startTestServer(t testing.TB) *Server {
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
	return joinedFor(t, s, name, Grant{})
}

// joinedFor enrolls a worker whose token allows g.
func joinedFor(t testing.TB, s *Server, name string, g Grant) *Identity {
	t.Helper()
	tok, err := s.NewToken("", g)
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
	if err := Enroll(context.Background(), parsed, id, "test", nil); err != nil {
		t.Fatal(err)
	}
	return id
}

// A worker enrolls once with a token, then connects with its nkey alone
// and can use the cluster's buckets; the token does not work twice.
func TestEnrollThenConnect(t *testing.T) {
	s := startTestServer(t)
	tok, _ := s.NewToken("", Grant{})
	id, _ := NewIdentity("w1")
	if err := Enroll(context.Background(), tok, id, "test", nil); err != nil {
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
	if err := Enroll(context.Background(), tok, other, "test", nil); err == nil {
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

// A join token fixes the pools its worker may take: a worker asking for a
// pool its token does not allow is refused (the token stays usable), and
// editing the token's own copy of its pools gains nothing, since serve
// enrolls by the grant it kept with the secret's hash. The twin: the same
// token enrolls a worker for its own pool, and serve records the grant.
func TestTokenPools(t *testing.T) {
	s := startTestServer(t)
	tok, err := s.NewToken("", Grant{Pools: []string{"gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := NewIdentity("w1")
	err = Enroll(context.Background(), tok, id, "test", []string{"release"})
	if err == nil || !strings.Contains(err.Error(), "allows pools gpu, not release") || !strings.Contains(err.Error(), "--pool release") {
		t.Fatalf("a gpu token enrolled pool release: %v", err)
	}
	// The holder rewrites the token's pools: serve still says gpu.
	forged := tok
	forged.Pools, forged.AnyPool = []string{"release"}, true
	parsed, err := ParseToken(forged.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := Enroll(context.Background(), parsed, id, "test", []string{"release"}); err == nil {
		t.Fatal("an edited token enrolled pool release")
	}
	if e := s.Registry.Get("w1"); e != nil {
		t.Fatalf("a refused enrollment was recorded: %+v", e)
	}
	// The twin: the same token, its own pool.
	if err := Enroll(context.Background(), parsed, id, "test", []string{"gpu"}); err != nil {
		t.Fatal(err)
	}
	e := s.Registry.Get("w1")
	if e == nil || e.AnyPool || strings.Join(e.Allowed, ",") != "gpu" || id.Grant == nil || id.Grant.String() != "gpu" {
		t.Fatalf("registry %+v, identity's grant %+v", e, id.Grant)
	}
	// No --pool on the token: pool default only; --any-pool: every pool.
	def, _ := s.NewToken("", Grant{})
	id2, _ := NewIdentity("w2")
	if err := Enroll(context.Background(), def, id2, "test", []string{"gpu"}); err == nil {
		t.Fatal("a token without pools enrolled pool gpu")
	}
	if err := Enroll(context.Background(), def, id2, "test", nil); err != nil || id2.Grant.String() != "default" {
		t.Fatalf("a token without pools: %v %+v", err, id2.Grant)
	}
	anyTok, _ := s.NewToken("", Grant{AnyPool: true})
	id3, _ := NewIdentity("w3")
	if err := Enroll(context.Background(), anyTok, id3, "test", []string{"gpu", "release"}); err != nil || !s.Registry.Get("w3").AnyPool {
		t.Fatalf("an any-pool token: %v", err)
	}
	if _, err := s.NewToken("", Grant{AnyPool: true, Pools: []string{"gpu"}}); err == nil {
		t.Fatal("--any-pool with --pool made a token")
	}
	if _, err := s.NewToken("", Grant{Pools: []string{"a.b"}}); err == nil {
		t.Fatal("a pool name with a dot made a token")
	}
}

// Serve's files from an earlier kusaw: an outstanding token (an expiry
// alone) allows pool default only; an enrolled worker (offered pools, no
// grant) keeps its entry and may take the pools it offered so far, and a
// pool it offers later that it may not take is not noted.
func TestPoolsUpgrade(t *testing.T) {
	dir := t.TempDir()
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	os.WriteFile(filepath.Join(dir, tokensFile), []byte(`{"`+hashSecret("old-secret")+`":"`+exp+`"}`), 0o600)
	os.WriteFile(filepath.Join(dir, enroll.WorkersFile), []byte(`[{"name":"old","nkey":"UX","xkey":"XX","enrolled":"2026-01-01T00:00:00Z","pools":["default","gpu"]},
{"name":"idle","nkey":"UY","xkey":"XY","enrolled":"2026-01-01T00:00:00Z"}]`), 0o600)
	g, ok := OpenTokens(dir).Grant("old-secret")
	if !ok || g.String() != "default" {
		t.Fatalf("an earlier token: %v %+v", ok, g)
	}
	r := OpenRegistry(dir)
	if e := r.Get("old"); e == nil || strings.Join(e.Allowed, ",") != "default,gpu" || e.NKey != "UX" {
		t.Fatalf("an earlier worker: %+v", e)
	}
	if e := r.Get("idle"); e == nil || strings.Join(e.Allowed, ",") != "default" {
		t.Fatalf("an earlier worker that offered nothing: %+v", e)
	}
	r.Offered("old", []string{"release", "gpu"})
	if e := r.Get("old"); strings.Join(e.Pools, ",") != "default,gpu" || e.Grant().Allows("release") {
		t.Fatalf("a pool it may not take was noted: %+v", e)
	}
	if EverOffered(dir)["release"] || !AllowedPools(dir)["gpu"] || AllowedPools(dir)["release"] {
		t.Fatalf("offered %v allowed %v", EverOffered(dir), AllowedPools(dir))
	}
}

// Attacker's side: the holder of a join token names an enrolled worker
// (w1) and its public nkey, with a curve key of her own, to rewrite w1's
// entry (its pools, the key its secrets are sealed to). She cannot sign
// with w1's nkey, so serve refuses, w1's entry stays and the token stays
// unspent. The twin: w1 itself joins again with a new token and takes
// the new token's pools; the pools it offered that it may still take stay.
func TestJoinAgain(t *testing.T) {
	s := startTestServer(t)
	w1 := joined(t, s, "w1")
	s.Registry.Offered("w1", []string{"default"})
	before := s.Registry.Get("w1")

	tok, _ := s.NewToken("", Grant{Pools: []string{"gpu"}})
	mallory, _ := NewIdentity("w1")
	nc, err := nats.Connect(s.URL(), nats.UserInfo(EnrollUser, tok.Secret), nats.Secure(PinnedTLS(tok.CA)), nats.CustomInboxPrefix(secretInbox(tok.Secret)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sig, _ := mallory.Sign([]byte(tok.Secret))
	for _, body := range []EnrollRequest{
		{Secret: tok.Secret, Name: "w1", NKey: w1.NKey(), XKey: mallory.XKey()},
		{Secret: tok.Secret, Name: "w1", NKey: w1.NKey(), XKey: mallory.XKey(), Sig: base64.RawURLEncoding.EncodeToString(sig)},
	} {
		b, _ := json.Marshal(body)
		m, err := nc.Request(SubjEnroll, b, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep EnrollReply
		if json.Unmarshal(m.Data, &rep) != nil || rep.Error == "" || !strings.Contains(rep.Error, "not signed by its key") {
			t.Fatalf("serve took a rewrite of w1's entry: %s", m.Data)
		}
	}
	if after := s.Registry.Get("w1"); after.XKey != before.XKey || strings.Join(after.Allowed, ",") != "default" {
		t.Fatalf("w1's entry changed: %+v", after)
	}
	if !s.Tokens.Valid(tok.Secret) {
		t.Fatal("a refused rewrite spent the token")
	}

	// The twin: w1 joins again with the token.
	if err := Enroll(context.Background(), tok, w1, "test", nil); err != nil {
		t.Fatal(err)
	}
	e := s.Registry.Get("w1")
	if e.XKey != before.XKey || strings.Join(e.Allowed, ",") != "gpu" || len(e.Pools) != 0 || w1.Grant.String() != "gpu" || w1.Joined != TokenID(tok) {
		t.Fatalf("w1 joined again: %+v, identity grant %v", e, w1.Grant)
	}
	// Joined again for default and gpu, after offering gpu: gpu stays.
	s.Registry.Offered("w1", []string{"gpu"})
	tok2, _ := s.NewToken("", Grant{Pools: []string{"default", "gpu"}})
	if err := Enroll(context.Background(), tok2, w1, "test", nil); err != nil {
		t.Fatal(err)
	}
	if e := s.Registry.Get("w1"); strings.Join(e.Pools, ",") != "gpu" || strings.Join(e.Allowed, ",") != "default,gpu" {
		t.Fatalf("w1 joined a third time: %+v", e)
	}
}

// serveWithPool starts the embedded server and opens serve's handles on
// it with pool's streams made: the set-up of the tests that attack a
// pool's data as a worker. ctx ends with the test (a minute at most).
func serveWithPool(t *testing.T, pool string) (*Server, context.Context, *Handles) {
	t.Helper()
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	serve, err := s.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serve.Close)
	sh, err := Open(ctx, serve)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.EnsurePool(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return s, ctx, sh
}
