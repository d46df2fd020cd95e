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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/kusaw/kusaw/cluster"
)

// freePorts are n loopback ports p, each with p+2000 and p+4000 free too
// (the route and monitoring ports Write derives).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		ok := p+4000 <= 65535
		var held []net.Listener
		for _, q := range []int{p + 2000, p + 4000} {
			if !ok {
				break
			}
			if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q)); err == nil {
				held = append(held, l2)
			} else {
				ok = false
			}
		}
		for _, h := range held {
			h.Close()
		}
		l.Close()
		if ok {
			out = append(out, p)
		}
	}
	return out
}

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
	port := freePorts(t, 1)[0]
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
	ports := freePorts(t, 3)
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
