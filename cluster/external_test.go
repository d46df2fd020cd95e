package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/natstest"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

func testExternal(t *testing.T, account, seed string, caPEM []byte, urls string) *External {
	t.Helper()
	x, err := OpenExternal(ExternalOptions{Dir: filepath.Join(t.TempDir(), "cluster"), URLs: urls, Account: account, SigningSeed: seed, CAPEM: caPEM})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func newAccountSigner(t *testing.T) (account, seed, signerPub string) {
	t.Helper()
	acc, _ := nkeys.CreateAccount()
	account, _ = acc.PublicKey()
	sk, _ := nkeys.CreateAccount()
	s, _ := sk.Seed()
	signerPub, _ = sk.PublicKey()
	return account, string(s), signerPub
}

// A worker's JWT is for its nkey, issued by the signing key on behalf of
// the account, with exactly workerPerms(name): the subjects the embedded
// server gives the same worker. It is not a bearer token.
func TestWorkerJWT(t *testing.T) {
	account, seed, signer := newAccountSigner(t)
	x := testExternal(t, account, seed, nil, "tls://nats.example:4222")
	w, _ := NewIdentity("gpu1")
	tok, err := x.WorkerJWT("gpu1", w.NKey(), Grant{Pools: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Subject != w.NKey() || uc.Issuer != signer || uc.IssuerAccount != account || uc.BearerToken || uc.Expires != 0 {
		t.Fatalf("claims: sub %s iss %s account %s bearer %v exp %d", uc.Subject, uc.Issuer, uc.IssuerAccount, uc.BearerToken, uc.Expires)
	}
	want := workerPerms("gpu1", Grant{Pools: []string{"default"}})
	if !reflect.DeepEqual([]string(uc.Pub.Allow), want.Publish.Allow) || !reflect.DeepEqual([]string(uc.Pub.Deny), want.Publish.Deny) ||
		!reflect.DeepEqual([]string(uc.Sub.Allow), want.Subscribe.Allow) || !reflect.DeepEqual([]string(uc.Sub.Deny), want.Subscribe.Deny) {
		t.Fatalf("permissions %+v, want those of workerPerms %+v %+v", uc.Permissions, want.Publish, want.Subscribe)
	}
	if !uc.Pub.Allow.Contains(EventsSubject("*", "gpu1")) || uc.Pub.Allow.Contains(EventsSubject("*", "*")) || uc.Pub.Allow.Contains("kusaw.>") {
		t.Fatalf("a worker may publish events under its own name only: %v", uc.Pub.Allow)
	}
	var vr jwt.ValidationResults
	uc.Validate(&vr)
	if vr.IsBlocking(true) {
		t.Fatalf("the JWT does not validate: %v", vr.Errors())
	}
	// Signed with the account's own key, the JWT names no issuer account.
	accKP, _ := nkeys.CreateAccount()
	accPub, _ := accKP.PublicKey()
	accSeed, _ := accKP.Seed()
	own := testExternal(t, accPub, string(accSeed), nil, "tls://nats.example:4222")
	tok, _ = own.WorkerJWT("gpu1", w.NKey(), Grant{Pools: []string{"default"}})
	if uc, _ := jwt.DecodeUserClaims(tok); uc.IssuerAccount != "" || uc.Issuer != accPub {
		t.Fatalf("own-key claims: %+v", uc)
	}
}

// A join token for an existing cluster carries the URLs, the CA bundle
// (or the system-roots marker) and a bearer JWT that may only ask to
// enroll and expires with the token.
func TestExternalToken(t *testing.T) {
	account, seed, _ := newAccountSigner(t)
	c := natstest.Start(t, t.TempDir())
	c.Server.Shutdown() // only its CA is used here
	x := testExternal(t, account, seed, c.CAPEM, "tls://n1:4222,tls://n2:4222")
	tok, err := x.NewToken("", Grant{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseToken(tok.String())
	if err != nil {
		t.Fatal(err)
	}
	if got.URLs != "tls://n1:4222,tls://n2:4222" || got.Addr != "" || got.CAPEM != string(c.CAPEM) || got.CA != pemFingerprint(c.CAPEM) || len(got.CA) != 64 {
		t.Fatalf("token %+v", got)
	}
	uc, err := jwt.DecodeUserClaims(got.JWT)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Unix(uc.Expires, 0)
	if !uc.BearerToken || exp.Before(time.Now().Add(TokenTTL-time.Minute)) || exp.After(time.Now().Add(TokenTTL+time.Minute)) {
		t.Fatalf("enrollment JWT: bearer %v expires %v", uc.BearerToken, exp)
	}
	ep := enrollPerms(EnrollInbox(uc.Subject))
	if !reflect.DeepEqual([]string(uc.Pub.Allow), ep.Publish.Allow) || !reflect.DeepEqual([]string(uc.Sub.Allow), ep.Subscribe.Allow) ||
		len(uc.Pub.Allow) != 1 || len(uc.Sub.Allow) != 1 || uc.Sub.Allow[0] != "_INBOX_ENROLL."+uc.Subject+".>" {
		t.Fatalf("enrollment permissions %+v", uc.Permissions)
	}
	if got, _ := x.NewToken("tls://other:4222", Grant{}); got.URLs != "tls://other:4222" {
		t.Fatalf("urls override: %q", got.URLs)
	}
	if got, _ := x.NewToken("o1:4222, nats://o2:4222", Grant{}); got.URLs != "tls://o1:4222,nats://o2:4222" {
		t.Fatalf("--addr without a scheme: %q", got.URLs)
	}
	// Without a CA bundle: the system-roots marker.
	sys := testExternal(t, account, seed, nil, "tls://n1:4222")
	st, _ := sys.NewToken("", Grant{})
	if got, err := ParseToken(st.String()); err != nil || got.CA != SystemRoots || got.CAPEM != "" {
		t.Fatalf("system roots token %+v %v", got, err)
	}
	// A token whose CA bundle does not match its pin is damaged.
	bad := tok
	bad.CA = strings.Repeat("0", 64)
	if _, err := ParseToken(bad.String()); err == nil {
		t.Fatal("a token with a CA bundle that does not match its pin parsed")
	}
	bad = st
	bad.CAPEM = string(c.CAPEM)
	if _, err := ParseToken(bad.String()); err == nil {
		t.Fatal("a system-roots token with a bundle parsed")
	}
	// Keys that are not what they claim are refused at start.
	if _, err := OpenExternal(ExternalOptions{Dir: t.TempDir(), URLs: "tls://n1:4222", Account: account, SigningSeed: "SUAGARBAGE"}); err == nil {
		t.Fatal("a bad seed opened")
	}
	u, _ := nkeys.CreateUser()
	us, _ := u.Seed()
	if _, err := OpenExternal(ExternalOptions{Dir: t.TempDir(), URLs: "tls://n1:4222", Account: account, SigningSeed: string(us)}); err == nil || !strings.Contains(err.Error(), "not an account signing seed") {
		t.Fatalf("a user seed as signing key: %v", err)
	}
}

// externalRig is serve on an operator-mode NATS server: its connection,
// enrollments and buckets.
type externalRig struct {
	c  *natstest.Cluster
	x  *External
	nc *nats.Conn
}

func startExternal(t *testing.T) *externalRig {
	t.Helper()
	c := natstest.Start(t, t.TempDir())
	x := testExternal(t, c.Account, c.SigningSeed, c.CAPEM, c.URL)
	nc, err := x.Connect("kusaw serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := x.ServeEnrollments(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if _, err := SetupReplicas(ctx, nc, 1); err != nil {
		t.Fatal(err)
	}
	return &externalRig{c: c, x: x, nc: nc}
}

// received collects what serve gets on subject.
func (r *externalRig) received(t *testing.T, subject string) func() []string {
	var mu sync.Mutex
	var got []string
	sub, err := r.nc.Subscribe(subject, func(m *nats.Msg) { mu.Lock(); got = append(got, m.Subject); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = r.nc.Flush()
	return func() []string { _ = r.nc.Flush(); mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

// On an operator-mode NATS server: a worker enrolls with a token, gets its
// JWT, connects with it and reaches the buckets; it may send events under
// its own name only; the token does not work twice; the server itself
// refuses a forged JWT, a copied JWT with another key, and the token's
// bearer JWT beyond asking to enroll.
func TestExternalEnrollAndConnect(t *testing.T) {
	r := startExternal(t)
	tok, err := r.x.NewToken("", Grant{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := NewIdentity("w1")
	if err := Enroll(context.Background(), tok, id, "test", nil); err != nil {
		t.Fatal(err)
	}
	if id.JWT == "" || id.Server != r.c.URL || id.CAPEM != string(r.c.CAPEM) || id.CAPin != pemFingerprint(r.c.CAPEM) || id.ServeXKey != r.x.Identity.XKey() {
		t.Fatalf("identity after enrolling: %+v", id)
	}
	if r.x.Registry.Get("w1") == nil {
		t.Fatal("serve did not record the worker")
	}
	// The identity survives a save and a load.
	dir := t.TempDir()
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	id, err = LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	perr := make(chan error, 4)
	wc, err := Dial(id, "w1", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perr <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	if _, err := Open(context.Background(), wc); err != nil {
		t.Fatalf("the worker cannot reach the buckets: %v", err)
	}
	got := r.received(t, "kusaw.events.>")
	_ = wc.Publish(EventsSubject("a1", "w1"), []byte("{}"))
	_ = wc.Publish(EventsSubject("a1", "w2"), []byte("{}")) // speaking for another worker
	_ = wc.Flush()
	select {
	case err := <-perr:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("unexpected async error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not refuse a publish under another worker's name")
	}
	time.Sleep(100 * time.Millisecond)
	if g := got(); len(g) != 1 || g[0] != EventsSubject("a1", "w1") {
		t.Fatalf("serve received %v: want only the worker's own events", g)
	}
	// The token is spent.
	id2, _ := NewIdentity("w2")
	if err := Enroll(context.Background(), tok, id2, "test", nil); err == nil || !strings.Contains(err.Error(), "used already") {
		t.Fatalf("a token used twice: %v", err)
	}
	if r.x.Registry.Get("w2") != nil {
		t.Fatal("a spent token enrolled a worker")
	}

	// Forgeries, refused by the NATS server itself.
	// A copied JWT with a key of one's own: the nonce's signature fails.
	thief, _ := NewIdentity("w1")
	thief.Server, thief.CAPin, thief.CAPEM, thief.JWT = id.Server, id.CAPin, id.CAPEM, id.JWT
	if _, err := Dial(thief, "thief"); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("a copied JWT with another key: %v", err)
	}
	// A JWT the forger signs for its own key with an account key of its
	// own, claiming kusaw's account.
	forger, _ := NewIdentity("w1")
	fakeAcc, _ := nkeys.CreateAccount()
	uc := jwt.NewUserClaims(forger.NKey())
	uc.IssuerAccount = r.c.Account
	forger.Server, forger.CAPin, forger.CAPEM = id.Server, id.CAPin, id.CAPEM
	if forger.JWT, err = uc.Encode(fakeAcc); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(forger, "forger"); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("a JWT from an unknown signing key: %v", err)
	}
	// A worker that never enrolled, with no JWT: refused too.
	none, _ := NewIdentity("none")
	none.Server, none.CAPin, none.CAPEM, none.JWT = id.Server, id.CAPin, id.CAPEM, "x"
	if _, err := Dial(none, "none"); err == nil {
		t.Fatal("a worker with no valid JWT connected")
	}
	// The legitimate twin of the forger: the account's own key signs a
	// JWT the server accepts (the forgeries failed on the signer only).
	twin, _ := NewIdentity("w1")
	twin.Server, twin.CAPin, twin.CAPEM = id.Server, id.CAPin, id.CAPEM
	if twin.JWT, err = jwt.NewUserClaims(twin.NKey()).Encode(r.c.AccountKey); err != nil {
		t.Fatal(err)
	}
	tc, err := Dial(twin, "twin")
	if err != nil {
		t.Fatalf("a JWT the account signed: %v", err)
	}
	tc.Close()

	// The token's bearer JWT, even before it is used, may only ask to
	// enroll: work published with it, subscriptions beyond its own inbox
	// (here: kusaw's subjects, and every inbox, where others' replies
	// go) are refused.
	tok2, _ := r.x.NewToken("", Grant{})
	tls, _ := ClusterTLS(r.c.CAPEM)
	eerr := make(chan error, 4)
	ec, err := nats.Connect(tok2.URLs, nats.Secure(tls), nats.UserJWT(func() (string, error) { return tok2.JWT, nil }, func([]byte) ([]byte, error) { return nil, nil }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { eerr <- err }))
	if err != nil {
		t.Fatalf("the token's JWT cannot connect: %v", err)
	}
	defer ec.Close()
	work := r.received(t, "kusaw.work.>")
	_ = ec.Publish(WorkSubject("default"), []byte("{}"))
	_ = ec.Flush()
	if _, err := ec.SubscribeSync("kusaw.>"); err != nil {
		t.Fatal(err)
	}
	if _, err := ec.SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	_ = ec.Flush()
	for range 3 {
		select {
		case err := <-eerr:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Fatalf("unexpected async error %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not refuse the enrollment JWT's publish or subscription")
		}
	}
	if g := work(); len(g) != 0 {
		t.Fatalf("work published with the enrollment JWT arrived: %v", g)
	}
}

// Serve with a signing key the account does not list is refused by the
// cluster, with a message naming the key to check.
func TestExternalUnknownSigningKey(t *testing.T) {
	c := natstest.Start(t, t.TempDir())
	other, _ := nkeys.CreateAccount()
	seed, _ := other.Seed()
	x := testExternal(t, c.Account, string(seed), c.CAPEM, c.URL)
	if _, err := x.Connect("kusaw serve", nats.MaxReconnects(0)); err == nil || !strings.Contains(err.Error(), "is signing_key a signing key of account") {
		t.Fatalf("an unknown signing key: %v", err)
	}
	// A nats:// URL still gets TLS, checked against the CA bundle.
	z := testExternal(t, c.Account, c.SigningSeed, c.CAPEM, strings.Replace(c.URL, "tls://", "nats://", 1))
	nc, err := z.Connect("kusaw serve", nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("nats:// URL: %v", err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Fatalf("a nats:// URL connected without TLS: %v", err)
	}
	nc.Close()
	// And without the CA, the system's roots do not trust the test's CA.
	y := testExternal(t, c.Account, c.SigningSeed, nil, c.URL)
	if _, err := y.Connect("kusaw serve", nats.MaxReconnects(0)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a cluster whose CA is not trusted: %v", err)
	}
}

// More replicas than the cluster has JetStream servers: Setup says which
// key asks for them.
func TestExternalTooManyReplicas(t *testing.T) {
	c := natstest.Start(t, t.TempDir())
	x := testExternal(t, c.Account, c.SigningSeed, c.CAPEM, c.URL)
	nc, err := x.Connect("kusaw serve", nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := SetupReplicas(ctx, nc, 3); err == nil || !strings.Contains(err.Error(), "serve.cluster.replicas") {
		t.Fatalf("3 replicas on one server: %v", err)
	}
	if _, err := SetupReplicas(ctx, nc, 1); err != nil {
		t.Fatalf("1 replica: %v", err)
	}
}

// On a cluster of three JetStream servers, replicas: 3 keeps every
// stream, bucket and the object store on all three, and the cluster still
// takes work and claims with one server gone.
func TestExternalReplicas(t *testing.T) {
	c := natstest.StartCluster(t, t.TempDir(), 3)
	x := testExternal(t, c.Account, c.SigningSeed, c.CAPEM, c.URL)
	nc, err := x.Connect("kusaw serve")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := SetupReplicas(ctx, nc, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{WorkStream, EventsStream, "KV_" + WorkersBucket, ClaimsStream("default"), ObjectsStream("default")} {
		st, err := h.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("%s: %d replicas configured, cluster %+v", name, info.Config.Replicas, info.Cluster)
		}
	}
	// One machine goes: not the one serve talks to, so the test sees the
	// quorum at work rather than a reconnect.
	var victim int
	for i, s := range c.Servers {
		if !strings.HasSuffix(nc.ConnectedUrl(), s.Addr().String()) {
			victim = i
		}
	}
	c.Servers[victim].Shutdown()
	c.Servers[victim].WaitForShutdown()
	retry := func(what string, f func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := f()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("with one of three servers gone, %s: %v", what, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	retry("publishing work", func() error { _, err := h.JS.Publish(ctx, WorkSubject("default"), []byte("{}")); return err })
	retry("claiming", func() error {
		_, err := h.Claim(ctx, "default", "r1/s/1", "w1")
		if errors.Is(err, ErrClaimed) {
			return nil // an earlier try was stored, its answer lost
		}
		return err
	})
}

// An account whose default permissions let its users do almost nothing
// still lets serve work: serve's JWT names its permissions (everything)
// instead of taking the account's defaults.
func TestExternalNarrowAccountDefaults(t *testing.T) {
	c := natstest.StartWith(t, t.TempDir(), 1, func(ac *jwt.AccountClaims) {
		ac.DefaultPermissions.Pub.Allow = jwt.StringList{"team.only"}
		ac.DefaultPermissions.Sub.Allow = jwt.StringList{"team.only"}
	})
	x := testExternal(t, c.Account, c.SigningSeed, c.CAPEM, c.URL)
	nc, err := x.Connect("kusaw serve", nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := SetupReplicas(ctx, nc, 1); err != nil {
		t.Fatalf("serve under narrow account defaults: %v", err)
	}
	// The twin that shows the defaults bite: a JWT without permissions.
	u, _ := nkeys.CreateUser()
	upub, _ := u.PublicKey()
	plain, err := x.userJWT(upub, "plain", nil, time.Time{}, false)
	if err != nil {
		t.Fatal(err)
	}
	tc, _ := ClusterTLS(c.CAPEM)
	pc, err := nats.Connect(c.URL, nats.Secure(tc), nats.UserJWT(func() (string, error) { return plain, nil }, u.Sign), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.Request("$JS.API.INFO", nil, 2*time.Second); err == nil {
		t.Fatal("a JWT without permissions reached the JetStream API: the account's defaults did not apply, so this test proves nothing")
	}
}

// On an operator-mode NATS server the worker's JWT holds it to its pools:
// a worker enrolled for pool default cannot make pool release's work
// consumer (the server refuses what its JWT does not allow). The twin: a
// worker enrolled for release makes it and takes release's work.
func TestExternalWorkerTakesOnlyItsPools(t *testing.T) {
	r := startExternal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sjs, _ := jetstream.New(r.nc)
	if _, err := sjs.Publish(ctx, WorkSubject("release"), []byte(`{"spec":{}}`)); err != nil {
		t.Fatal(err)
	}
	join := func(name string, g Grant) *nats.Conn {
		tok, err := r.x.NewToken("", g)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := NewIdentity(name)
		if err := Enroll(ctx, tok, id, "test", nil); err != nil {
			t.Fatal(err)
		}
		nc, err := Dial(id, name, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	cfg := jetstream.ConsumerConfig{Durable: WorkConsumer("release"), FilterSubject: WorkSubject("release"), AckPolicy: jetstream.AckExplicitPolicy}
	mjs, _ := jetstream.New(join("mallory", Grant{}))
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
	if _, err := mjs.CreateOrUpdateConsumer(cctx, WorkStream, cfg); err == nil {
		t.Fatal("a default worker's JWT made pool release's consumer")
	}
	ccancel()
	rjs, _ := jetstream.New(join("rel", Grant{Pools: []string{"release"}}))
	c, err := rjs.CreateOrUpdateConsumer(ctx, WorkStream, cfg)
	if err != nil {
		t.Fatalf("a release worker's JWT cannot make its pool's consumer: %v", err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("the release worker took no work: %v", err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("the release worker cannot acknowledge its work: %v", err)
	}
}
