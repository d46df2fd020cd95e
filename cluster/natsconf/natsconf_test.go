package natsconf

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/internal/natstest"
)

// startConf runs a server from a configuration file Write made, in this
// process, until the test ends.
func startConf(t *testing.T, file string) *server.Server {
	t.Helper()
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("nats-server cannot read %s: %v", file, err)
	}
	o.NoLog, o.NoSigs = true, true
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatalf("the server of %s did not start", file)
	}
	return ns
}

// serveOn is serve's side from what Write printed: the URLs, the
// account, the signing seed's file and the CA file.
func serveOn(t *testing.T, r *Result, urls string, caFile string) (*nats.Conn, error) {
	t.Helper()
	seed, err := os.ReadFile(r.SigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	x, err := cluster.OpenExternal(cluster.ExternalOptions{Dir: filepath.Join(t.TempDir(), "cluster"), URLs: urls, Account: r.Account, SigningSeed: string(seed), CAPEM: ca})
	if err != nil {
		t.Fatal(err)
	}
	return x.Connect("kusaw serve")
}

// One server on localhost: nats-server takes the configuration, serve
// connects with what Write printed and its start-up check passes; the
// CA and host checks hold (a wrong CA names serve.cluster.ca; a URL
// with a host the certificate does not name names serve.cluster.nats_url);
// a client without a JWT of the account is refused.
func TestOneServer(t *testing.T) {
	port := natstest.PortTriples(t, 1)[0]
	dir := t.TempDir()
	r, err := Write(Options{Dir: dir, Servers: []string{"localhost:" + strconv.Itoa(port)}})
	if err != nil {
		t.Fatal(err)
	}
	if r.URLs != fmt.Sprintf("tls://localhost:%d", port) || r.Replicas != 1 || len(r.ConfFiles) != 1 {
		t.Fatalf("result: %+v", r)
	}
	startConf(t, r.ConfFiles[0])
	nc, err := serveOn(t, r, r.URLs, r.CAFile)
	if err != nil {
		t.Fatalf("serve on the written configuration: %v", err)
	}
	defer nc.Close()
	if err := cluster.Preflight(context.Background(), nc, 1); err != nil {
		t.Fatalf("serve's start-up check refuses the written configuration: %v", err)
	}
	if _, err := cluster.SetupReplicas(context.Background(), nc, 1); err != nil {
		t.Fatalf("kusaw's streams on the written configuration: %v", err)
	}

	// The attacker's side: no JWT, or a JWT of another account.
	caPool := x509.NewCertPool()
	ca, _ := os.ReadFile(r.CAFile)
	caPool.AppendCertsFromPEM(ca)
	if anon, err := nats.Connect(r.URLs, nats.Secure(&tls.Config{RootCAs: caPool})); err == nil {
		anon.Close()
		t.Error("a client without credentials connected")
	}
	// Someone else's CA: the error names the key to set.
	other := t.TempDir()
	if _, err := Write(Options{Dir: other, Servers: []string{"localhost:1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := serveOn(t, r, r.URLs, filepath.Join(other, "ca.pem")); err == nil || !strings.Contains(err.Error(), "does not chain to serve.cluster.ca") {
		t.Errorf("a wrong CA: %v", err)
	}
	// The certificate names localhost, the URL 127.0.0.1.
	if _, err := serveOn(t, r, fmt.Sprintf("tls://127.0.0.1:%d", port), r.CAFile); err == nil || !strings.Contains(err.Error(), "does not name the host as serve.cluster.nats_url writes it") {
		t.Errorf("a host the certificate does not name: %v", err)
	}
	// The seeds are not readable by others.
	for _, f := range []string{SigningKeyFile, "operator.nk", "kusaw-account.nk", "ca-key.pem", "nats1-key.pem", "sys.creds"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, err, fi.Mode())
		}
	}
	// Writing again into the same folder is refused: new keys would shut
	// out a cluster that runs on the old ones.
	if _, err := Write(Options{Dir: dir, Servers: []string{"localhost:" + strconv.Itoa(port)}}); err == nil || !strings.Contains(err.Error(), "holds a NATS configuration already") {
		t.Errorf("writing twice: %v", err)
	}
}

// Three servers on loopback route to each other over mutual TLS and
// elect a JetStream leader; kusaw's streams are made with replicas 3.
// From the attacker's side, a route connection showing a certificate of
// another CA is cut; the twin, one showing the cluster CA's, is not.
func TestThreeServers(t *testing.T) {
	ports := natstest.PortTriples(t, 3)
	var addrs []string
	for _, p := range ports {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	dir := t.TempDir()
	r, err := Write(Options{Dir: dir, Servers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	var servers []*server.Server
	for _, f := range r.ConfFiles {
		servers = append(servers, startConf(t, f))
	}
	deadline := time.Now().Add(30 * time.Second)
	for !servers[0].JetStreamIsClustered() || servers[0].NumRoutes() < 2 || !anyLeader(servers) {
		if time.Now().After(deadline) {
			t.Fatalf("the three servers did not form a JetStream cluster: routes %d", servers[0].NumRoutes())
		}
		time.Sleep(100 * time.Millisecond)
	}
	nc, err := serveOn(t, r, r.URLs, r.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := cluster.Preflight(context.Background(), nc, 3); err != nil {
		t.Fatalf("serve's start-up check: %v", err)
	}
	if _, err := cluster.SetupReplicas(context.Background(), nc, 3); err != nil {
		t.Fatalf("kusaw's streams with replicas 3: %v", err)
	}

	routeAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]+2000)
	own, err := tls.LoadX509KeyPair(filepath.Join(dir, "nats2.pem"), filepath.Join(dir, "nats2-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	foreignDir := t.TempDir()
	if _, err := Write(Options{Dir: foreignDir, Servers: addrs}); err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.LoadX509KeyPair(filepath.Join(foreignDir, "nats2.pem"), filepath.Join(foreignDir, "nats2-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dialRoute(routeAddr, foreign); err == nil || !isTLSAlert(err) {
		t.Errorf("a route with another CA's certificate: %v", err)
	}
	if err := dialRoute(routeAddr, own); err != nil && isTLSAlert(err) {
		t.Errorf("a route with the cluster CA's certificate was refused: %v", err)
	}
}

// anyLeader: some server leads JetStream's metadata and every one says it
// is healthy (what nats-server's /healthz answers).
func anyLeader(ss []*server.Server) bool {
	lead := false
	for _, s := range ss {
		lead = lead || s.JetStreamIsLeader()
		if h := s.Healthz(nil); h == nil || h.Status != "ok" {
			return false
		}
	}
	return lead
}

// dialRoute connects to a route port as a server would: TLS first
// (routes do the handshake before anything else), with cert as the
// client certificate; it returns what the first read after the
// handshake says (nil: the server's INFO).
func dialRoute(addr string, cert tls.Certificate) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}) //nolint:gosec // the server's side is what is tested
	if err := tc.Handshake(); err != nil {
		return err
	}
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "INFO ") {
		return fmt.Errorf("the route port said %q", line)
	}
	return nil
}

func isTLSAlert(err error) bool {
	return err != nil && strings.Contains(err.Error(), "tls:")
}

// Bad input is refused with what to give.
func TestOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Servers: []string{"a:4222"}}, "give --dir"},
		{Options{Dir: "x", Servers: []string{"a:4222", "b:4222"}}, "give 1, 3 or 5"},
		{Options{Dir: "x", Servers: []string{"a"}}, "not HOST:PORT"},
		{Options{Dir: "x", Servers: []string{"a:4222", "a:4222", "b:4222"}}, "given twice"},
		{Options{Dir: "x", Servers: []string{"a:4222"}, Routes: []string{"a:1", "b:2"}}, "one route address per server"},
		{Options{Dir: "x", Servers: []string{"a:4222"}, CACert: "ca.pem"}, "--ca-cert and --ca-key together"},
		{Options{Dir: "x", Servers: []string{"a:4222"}, Certs: []string{"c.pem"}}, "--cert and --key once per server"},
		{Options{Dir: "x", Servers: []string{"a:4222"}, MaxFileStore: 1 << 30}, "less than kusaw's streams"},
		{Options{Dir: "x", Servers: []string{"a:4222"}, InstallDir: "rel"}, "not an absolute path"},
	} {
		if tc.o.Dir != "" {
			tc.o.Dir = filepath.Join(t.TempDir(), tc.o.Dir)
		}
		if _, err := Write(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// The operator's own certificates are checked before anything is
// written: one that does not name its server's host is refused with it.
func TestOwnCertificates(t *testing.T) {
	src := t.TempDir()
	if _, err := Write(Options{Dir: src, Servers: []string{"nats1.lan:4222"}}); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := filepath.Join(src, "nats1.pem"), filepath.Join(src, "nats1-key.pem"), filepath.Join(src, "ca.pem")
	_, err := Write(Options{Dir: t.TempDir(), Servers: []string{"nats9.lan:4222"}, CACert: ca, Certs: []string{cert}, Keys: []string{key}})
	if err == nil || !strings.Contains(err.Error(), "cannot serve nats9.lan") {
		t.Errorf("a certificate for another host: %v", err)
	}
	dir := t.TempDir()
	r, err := Write(Options{Dir: dir, Servers: []string{"nats1.lan:4222"}, CACert: ca, Certs: []string{cert}, Keys: []string{key}})
	if err != nil {
		t.Fatalf("the operator's own certificate: %v", err)
	}
	conf, _ := os.ReadFile(r.ConfFiles[0])
	if !strings.Contains(string(conf), strconv.Quote(cert)) {
		t.Errorf("the configuration does not use the operator's certificate:\n%s", conf)
	}
	// Their own CA, signing new certificates.
	if _, err := Write(Options{Dir: t.TempDir(), Servers: []string{"nats2.lan:4222"}, CACert: ca, CAKey: filepath.Join(src, "ca-key.pem")}); err != nil {
		t.Errorf("the operator's own CA: %v", err)
	}
}

// revokerOf is serve's revoker from what Write printed.
func revokerOf(t *testing.T, r *Result) *cluster.Revoker {
	t.Helper()
	sys, _ := os.ReadFile(r.SystemKeyFile)
	op, _ := os.ReadFile(r.OperatorKeyFile)
	ca, _ := os.ReadFile(r.CAFile)
	rv, err := cluster.NewRevoker(cluster.RevokerOptions{URLs: r.URLs, CAPEM: ca, Account: r.Account, SystemAccount: r.SystemAccount,
		SystemSeed: string(sys), OperatorSeed: string(op)})
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// From a retired worker's side on three servers of a written
// configuration: once serve revokes its key on the account, the server it
// is connected to closes its connection, it cannot connect again to any
// server, one that was down during the revocation included (the full
// resolver syncs it from the others) and one restarted since (it keeps
// the update on disk); nothing it publishes reaches serve. The twin, a
// worker enrolled beside it and not retired, keeps connecting and
// publishing on every server. Serve's system user may touch nothing but
// kusaw's account JWT.
func TestRetiredWorkerRevoked(t *testing.T) {
	ports := natstest.PortTriples(t, 3)
	var addrs []string
	for _, p := range ports {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	dir := t.TempDir()
	r, err := Write(Options{Dir: dir, Servers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	servers := make([]*server.Server, 3)
	for i, f := range r.ConfFiles {
		servers[i] = startConf(t, f)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !anyLeader(servers) || servers[0].NumRoutes() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the three servers did not form a cluster")
		}
		time.Sleep(100 * time.Millisecond)
	}
	seed, _ := os.ReadFile(r.SigningKeyFile)
	ca, _ := os.ReadFile(r.CAFile)
	x, err := cluster.OpenExternal(cluster.ExternalOptions{Dir: filepath.Join(t.TempDir(), "cluster"), URLs: r.URLs, Account: r.Account, SigningSeed: string(seed), CAPEM: ca})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := x.Connect("kusaw serve")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := x.ServeEnrollments(ctx, nc); err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 64)
	if _, err := nc.Subscribe("kusaw.events.>", func(m *nats.Msg) { events <- m.Subject }); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	ids := map[string]*cluster.Identity{}
	for _, name := range []string{"w1", "w2"} {
		tok, err := x.NewToken("", cluster.Grant{})
		if err != nil {
			t.Fatal(err)
		}
		id, _ := cluster.NewIdentity(name)
		if err := cluster.Enroll(ctx, tok, id, "test", nil); err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	// on is id dialing only server i.
	on := func(id *cluster.Identity, i int) *cluster.Identity {
		c := *id
		c.Server = "tls://" + addrs[i]
		return &c
	}
	// reaches says whether a publish of name's on conn arrives at serve.
	reaches := func(conn *nats.Conn, name, attempt string) bool {
		_ = conn.Publish(cluster.EventsSubject(attempt, name), []byte("{}"))
		_ = conn.Flush()
		want := cluster.EventsSubject(attempt, name)
		for {
			select {
			case s := <-events:
				if s == want {
					return true
				}
			case <-time.After(2 * time.Second):
				return false
			}
		}
	}
	w1, err := cluster.Dial(on(ids["w1"], 0), "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	if !reaches(w1, "w1", "a0") {
		t.Fatal("the worker to retire cannot publish before it is retired")
	}

	// Server 3 is down while serve revokes.
	servers[2].Shutdown()
	servers[2].WaitForShutdown()
	x.Registry.Retire("w1")
	rv := revokerOf(t, r)
	if err := rv.Revoke(ctx, x.Registry.RetiredKeys()); err != nil {
		t.Fatalf("revoking the retired worker: %v", err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for w1.IsConnected() && !w1.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatal("the retired worker's connection stayed open after the revocation")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The update reaches the servers one after another: once both that
	// are up keep it, nothing of the retired worker gets through.
	w1Key := ids["w1"].NKey()
	for _, name := range []string{"nats1", "nats2"} {
		f := filepath.Join(dir, "jetstream", name, "jwt", r.Account+".jwt")
		for {
			b, _ := os.ReadFile(f)
			if ac, err := jwt.DecodeAccountClaims(string(b)); err == nil && ac.Revocations[w1Key] != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not keep the revocation in %s", name, f)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if reaches(w1, "w1", "a1") {
		t.Fatalf("the retired worker's publish reached serve after the revocation (on %s)", w1.ConnectedUrl())
	}
	w1.Close()
	for _, i := range []int{0, 1} {
		if c, err := cluster.Dial(on(ids["w1"], i), "w1"); err == nil {
			c.Close()
			t.Errorf("the retired worker connected to server %d", i+1)
		}
		twin, err := cluster.Dial(on(ids["w2"], i), "w2")
		if err != nil {
			t.Fatalf("the twin cannot connect to server %d: %v", i+1, err)
		}
		if !reaches(twin, "w2", fmt.Sprintf("b%d", i)) {
			t.Errorf("the twin's publish on server %d did not reach serve", i+1)
		}
		twin.Close()
	}
	// Revoking again adds nothing and pushes nothing.
	if err := rv.Revoke(ctx, x.Registry.RetiredKeys()); err != nil {
		t.Fatal(err)
	}

	// Server 1 restarts and keeps the update on disk; server 3 comes
	// back and syncs from the others (within the resolver's interval).
	servers[0].Shutdown()
	servers[0].WaitForShutdown()
	servers[0] = startConf(t, r.ConfFiles[0])
	servers[2] = startConf(t, r.ConfFiles[2])
	for _, i := range []int{2, 0} {
		var err error
		deadline = time.Now().Add(20 * time.Second)
		for {
			var c *nats.Conn
			if c, err = cluster.Dial(on(ids["w1"], i), "w1"); err == nil {
				// The server may answer before its resolver synced: wait
				// for it, then it must refuse.
				c.Close()
				if time.Now().Before(deadline) {
					time.Sleep(200 * time.Millisecond)
					continue
				}
			}
			break
		}
		if err == nil {
			t.Errorf("the retired worker connected to server %d after its restart", i+1)
		}
		twin, err := cluster.Dial(on(ids["w2"], i), "w2")
		if err != nil {
			t.Fatalf("the twin cannot connect to server %d after its restart: %v", i+1, err)
		}
		twin.Close()
	}

	// The retired key with a new token under a new name: refused (the
	// revocation is by key, and a JWT issued now would pass it); the twin,
	// a new key with a new token, joins.
	again := *ids["w1"]
	again.Name, again.JWT = "w1b", ""
	tok, _ := x.NewToken("", cluster.Grant{})
	if err := cluster.Enroll(ctx, tok, &again, "test", nil); err == nil || !strings.Contains(err.Error(), "retired worker") {
		t.Errorf("the retired key joining again as w1b: %v", err)
	}
	fresh, _ := cluster.NewIdentity("w3")
	tok, _ = x.NewToken("", cluster.Grant{})
	if err := cluster.Enroll(ctx, tok, fresh, "test", nil); err != nil {
		t.Errorf("a new key joining: %v", err)
	}

	// Serve's system user: the scope gives it kusaw's account JWT and no
	// other subject of the system account.
	perr := make(chan error, 4)
	sysUser := sysConn(t, r, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perr <- err }))
	defer sysUser.Close()
	if _, err := sysUser.Request("$SYS.REQ.SERVER.PING.CONNZ", nil, 2*time.Second); err == nil {
		t.Error("serve's system user may ask the servers for their connections")
	}
	if _, err := sysUser.Request("$SYS.REQ.ACCOUNT."+r.SystemAccount+".CLAIMS.LOOKUP", nil, 2*time.Second); err == nil {
		t.Error("serve's system user may look up another account's JWT")
	}
	m, err := sysUser.Request("$SYS.REQ.ACCOUNT."+r.Account+".CLAIMS.LOOKUP", nil, 5*time.Second)
	if err != nil || !strings.HasPrefix(string(m.Data), "eyJ") {
		t.Errorf("the twin: serve's system user looks up kusaw's account: %v", err)
	}
}

// sysConn is a user of the system account signed by the scoped key, as
// the revoker makes one.
func sysConn(t *testing.T, r *Result, opts ...nats.Option) *nats.Conn {
	t.Helper()
	seed, _ := os.ReadFile(r.SystemKeyFile)
	sk, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.IssuerAccount = r.SystemAccount
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	tok, err := uc.Encode(sk)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(r.CAFile)
	tc, _ := cluster.ClusterTLS(ca)
	nc, err := nats.Connect(r.URLs, append([]nats.Option{nats.Secure(tc), nats.CustomInboxPrefix("_INBOX_KUSAW_REVOKE"),
		nats.UserJWT(func() (string, error) { return tok, nil }, u.Sign)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}
