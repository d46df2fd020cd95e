package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/kusaw/kusaw/providers/providertest"
)

// The egress end-to-end suite: real clients (curl, git, a Go program,
// Node, bash) inside the real sandbox, through the bridge and the proxy,
// to upstreams on the host's loopback. Names a test would look up go to
// a stub DNS server on 127.0.0.1 (sandbox.egress.resolver), so nothing
// ever leaves loopback.

// exactN is what the exact-bytes upstreams send before closing: odd, and
// larger than any relay buffer.
const exactN = 1<<20 + 7

// egressFixture is shared by every subtest: a CA, the upstreams, the stub
// DNS server and a tools folder (read-only in the sandbox) with the CA
// PEM, the Go client and the Node script.
type egressFixture struct {
	tools  string // allow_read: ca.pem, egressclient, fetch.mjs
	caPEM  string
	leaf   tls.Certificate
	caPool *x509.CertPool
	dns    *stubDNS

	tlsUp, plainUp, gitUp, wsUp, exactHTTP, exactTLS *upstream
	gitBare                                          string
}

// upstream is a loopback server that counts what reaches it.
type upstream struct {
	ln    net.Listener
	port  string
	conns atomic.Int64
	mu    sync.Mutex
	paths []string
}

func (u *upstream) Accept() (net.Conn, error) {
	c, err := u.ln.Accept()
	if err == nil {
		u.conns.Add(1)
	}
	return c, err
}
func (u *upstream) Close() error   { return u.ln.Close() }
func (u *upstream) Addr() net.Addr { return u.ln.Addr() }

func (u *upstream) saw(path string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, p := range u.paths {
		if p == path {
			return true
		}
	}
	return false
}

func (u *upstream) note(r *http.Request) {
	u.mu.Lock()
	u.paths = append(u.paths, r.URL.Path)
	u.mu.Unlock()
}

func newUpstream(t *testing.T) *upstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return &upstream{ln: ln, port: port}
}

// serveHTTP serves h on u, over TLS with the fixture's leaf when tlsOn.
func (fx *egressFixture) serveHTTP(t *testing.T, u *upstream, tlsOn bool, h http.HandlerFunc) {
	var l net.Listener = u
	if tlsOn {
		l = tls.NewListener(u, &tls.Config{Certificates: []tls.Certificate{fx.leaf}})
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { u.note(r); h(w, r) }), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)} // the SNI and budget tests cut handshakes on purpose
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

func newEgressFixture(t *testing.T) *egressFixture {
	need(t, "curl")
	need(t, "git")
	need(t, "go")
	fx := &egressFixture{tools: t.TempDir()}
	fx.makeCA(t)
	fx.dns = newStubDNS(t)
	fx.dns.set("localhost", "127.0.0.1")

	fx.tlsUp = newUpstream(t)
	fx.serveHTTP(t, fx.tlsUp, true, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "hello over tls %s", r.URL.Path)
	})
	fx.plainUp = newUpstream(t)
	fx.serveHTTP(t, fx.plainUp, false, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over http %s", r.URL.Path)
	})
	fx.wsUp = newUpstream(t)
	go fx.serveWS(fx.wsUp)
	fx.exactHTTP = newUpstream(t)
	go serveExact(fx.exactHTTP, false, fx.leaf)
	fx.exactTLS = newUpstream(t)
	go serveExact(fx.exactTLS, true, fx.leaf)
	fx.startGit(t)

	// The Go client, built outside the sandbox, run inside.
	build := exec.Command("go", "build", "-o", filepath.Join(fx.tools, "egressclient"), "./testdata/egressclient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the Go client: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(fx.tools, "fetch.mjs"), `const url = process.argv[2];
try {
  const r = await fetch(url);
  console.log("status:", r.status, await r.text());
} catch (e) {
  console.log("fetch failed:", e.cause ? e.cause.code || e.cause.message : e.message);
  process.exit(7);
}
`)
	return fx
}

func (fx *egressFixture) makeCA(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kusaw e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(der)
	lkey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ltmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost", "svc.test", "other.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	lder, err := x509.CreateCertificate(rand.Reader, ltmpl, caCert, &lkey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	fx.leaf = tls.Certificate{Certificate: [][]byte{lder}, PrivateKey: lkey}
	fx.caPool = x509.NewCertPool()
	fx.caPool.AddCert(caCert)
	fx.caPEM = filepath.Join(fx.tools, "ca.pem")
	writeFile(t, fx.caPEM, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
}

// serveWS answers an HTTP Upgrade with 101 and echoes what follows.
func (fx *egressFixture) serveWS(u *upstream) {
	for {
		c, err := u.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			r, err := http.ReadRequest(br)
			if err != nil || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
				return
			}
			u.note(r)
			fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
			io.Copy(c, br)
		}()
	}
}

// serveExact sends exactly exactN bytes and closes: after an HTTP/1.0
// status line (no length: the close ends the body), or after a TLS
// handshake.
func serveExact(u *upstream, tlsOn bool, leaf tls.Certificate) {
	payload := make([]byte, exactN)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for {
		c, err := u.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			if tlsOn {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{leaf}})
				if tc.Handshake() != nil {
					return
				}
				tc.Write(payload)
				tc.Close()
				return
			}
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n")
			c.Write(payload)
		}()
	}
}

// startGit serves a bare repository over smart HTTP (git http-backend
// through net/http/cgi) on TLS, with pushes enabled.
func (fx *egressFixture) startGit(t *testing.T) {
	root := t.TempDir()
	fx.gitBare = filepath.Join(root, "up.git")
	git(t, root, "init", "-q", "--bare", "-b", "main", fx.gitBare)
	git(t, fx.gitBare, "config", "http.receivepack", "true")
	seed := newRepo(t, root, "seed")
	git(t, seed, "push", "-q", fx.gitBare, "main")
	execPath := git(t, root, "--exec-path")
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git-http-backend is not installed (it comes with Debian's git package): %v", err)
		}
		t.Skipf("git-http-backend is not installed: %v", err)
	}
	fx.gitUp = newUpstream(t)
	h := &cgi.Handler{Path: backend, Root: "/", Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"}}
	fx.serveHTTP(t, fx.gitUp, true, h.ServeHTTP)
}

// stubDNS answers A queries on loopback UDP from a table; everything else
// is NXDOMAIN or empty, so the proxy can never learn a real address.
type stubDNS struct {
	addr    string
	mu      sync.Mutex
	answers map[string]netip.Addr
	asked   map[string]int
}

func newStubDNS(t *testing.T) *stubDNS {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &stubDNS{addr: pc.LocalAddr().String(), answers: map[string]netip.Addr{}, asked: map[string]int{}}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := s.answer(buf[:n]); out != nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	return s
}

func (s *stubDNS) set(name, addr string) {
	s.mu.Lock()
	s.answers[strings.ToLower(name)+"."] = netip.MustParseAddr(addr)
	s.mu.Unlock()
}

// count is how often name was asked.
func (s *stubDNS) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[strings.ToLower(name)+"."]
}

func (s *stubDNS) answer(msg []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	s.mu.Lock()
	a, ok := s.answers[strings.ToLower(q.Name.String())]
	s.asked[strings.ToLower(q.Name.String())]++
	s.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	if ok && q.Type == dnsmessage.TypeA {
		b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}, dnsmessage.AResource{A: a.As4()})
	}
	out, _ := b.Finish()
	return out
}

// factory writes a factory for the fixture: one step x whose sandbox is
// required with an allowlist of the fixture's upstreams (as localhost:port)
// plus extra egress settings.
func (fx *egressFixture) factory(t *testing.T, extraEgress, extraSteps string) string {
	allow := []string{}
	for _, u := range []*upstream{fx.tlsUp, fx.plainUp, fx.gitUp, fx.wsUp, fx.exactHTTP, fx.exactTLS} {
		allow = append(allow, `"localhost:`+u.port+`"`)
	}
	allow = append(allow, `"svc.test:`+fx.plainUp.port+`"`, `"svc.test:`+fx.tlsUp.port+`"`)
	return factoryDir(t, `version: 1
repos:
  app: {path: ./app}
sandbox:
  mode: required
  network: allowlist
  allow_read: [`+fx.tools+`]
  egress:
    resolver: "`+fx.dns.addr+`"
    allow: [`+strings.Join(allow, ", ")+`]
`+extraEgress+`
pipelines:
  default: [x]
steps:
  x:
    run: ["true"]
`+extraSteps, "app")
}

// sandboxRun is one kusaw sandbox exec and its attempt folder.
type sandboxRun struct {
	result
	adir string
}

// execIn runs script under sh in step's sandbox and returns the attempt.
func execIn(t *testing.T, dir, step, script string, env ...string) sandboxRun {
	t.Helper()
	before := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
	for _, e := range ents {
		before[e.Name()] = true
	}
	res := runKusawEnv(t, dir, env, "sandbox", "exec", "--step", step, "--", "sh", "-c", script)
	ents, _ = os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
	for _, e := range ents {
		if !before[e.Name()] {
			return sandboxRun{res, filepath.Join(dir, ".kusaw", "runs", e.Name(), "steps", step, "1")}
		}
	}
	t.Fatalf("kusaw sandbox exec recorded no run (exit %d)\n%s%s", res.code, res.stdout, res.stderr)
	return sandboxRun{}
}

// egressLines are the attempt's egress.log entries.
func (r sandboxRun) egressLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(readFile(t, filepath.Join(r.adir, "egress.log")), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["decision"] != nil {
			out = append(out, m)
		}
	}
	return out
}

// logged says whether egress.log has a decision for host:port (port 0:
// any) whose reason starts with reason ("" any).
func (r sandboxRun) logged(t *testing.T, decision, host string, port int, reason string) bool {
	for _, m := range r.egressLines(t) {
		p, _ := m["port"].(float64)
		rs, _ := m["reason"].(string)
		if m["decision"] == decision && m["host"] == host && (port == 0 || int(p) == port) && strings.HasPrefix(rs, reason) {
			return true
		}
	}
	return false
}

// verify checks the attempt's egress.log and events with kusaw log verify.
func (r sandboxRun) verify(t *testing.T, dir string) {
	t.Helper()
	if v := runKusaw(t, dir, "log", "verify", "--strict", filepath.Join(r.adir, "egress.log"), filepath.Join(r.adir, "events.jsonl")); v.code != 0 {
		t.Errorf("kusaw log verify: %d %s%s", v.code, v.stdout, v.stderr)
	}
	// The record of what the attempt reached cannot stand in for another
	// attempt's: copied to attempt 99's place it fails, naming both.
	other := filepath.Join(filepath.Dir(r.adir), "99")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(other)
	writeFile(t, filepath.Join(other, "egress.log"), readFile(t, filepath.Join(r.adir, "egress.log")))
	if v := runKusaw(t, dir, "log", "verify", filepath.Join(other, "egress.log")); v.code != 7 || !strings.Contains(v.stdout, "copied from another place") || !strings.Contains(v.stdout, "attempt 99") {
		t.Errorf("an egress.log copied over another attempt's: %d %s%s", v.code, v.stdout, v.stderr)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// noProxyOff runs a command with NO_PROXY unset: the sandbox keeps
// loopback names local by design, and the test upstreams are reached as
// localhost through the proxy.
const noProxyOff = "env -u NO_PROXY -u no_proxy "

func TestEgressClients(t *testing.T) {
	needSandbox(t)
	fx := newEgressFixture(t)
	dir := fx.factory(t, "", `  node:
    run: [node, fetch.mjs]
`)
	ca := fx.caPEM
	client := filepath.Join(fx.tools, "egressclient")

	t.Run("curl", func(t *testing.T) {
		r := execIn(t, dir, "x", fmt.Sprintf(`set -e
%[1]scurl -sS --cacert %[2]s https://localhost:%[3]s/curl-tls; echo
%[1]scurl -sS http://localhost:%[4]s/curl-http; echo
%[1]scurl -sS -o /dev/null -w 'denied-http:%%{http_code}\n' http://denied.test/x || true
%[1]scurl -sS -D - -o /dev/null https://denied.test/x 2>&1 | head -3 || true
%[1]scurl -sS http://denied.test/x || true`, noProxyOff, ca, fx.tlsUp.port, fx.plainUp.port))
		if r.code != 0 {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		for _, want := range []string{"hello over tls /curl-tls", "hello over http /curl-http", "denied-http:403",
			"kusaw: denied.test:80 is not allowed; add it to steps.x.sandbox.egress.allow", "403"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("output lacks %q:\n%s%s", want, r.stdout, r.stderr)
			}
		}
		if !r.logged(t, "allow", "localhost", atoi(fx.tlsUp.port), "") || !r.logged(t, "allow", "localhost", atoi(fx.plainUp.port), "") ||
			!r.logged(t, "refuse", "denied.test", 80, "host.not_allowed") || !r.logged(t, "refuse", "denied.test", 443, "host.not_allowed") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		r.verify(t, dir)
	})

	t.Run("git", func(t *testing.T) {
		repo := fmt.Sprintf("https://localhost:%s/up.git", fx.gitUp.port)
		r := execIn(t, dir, "x", fmt.Sprintf(`set -e
export GIT_SSL_CAINFO=%[2]s GIT_CONFIG_NOSYSTEM=1
cd "$TMPDIR"
%[1]sgit clone -q %[3]s clone
cd clone
echo pushed from the sandbox > SANDBOX.md
git add SANDBOX.md
git -c user.email=s@example.invalid -c user.name=sandbox commit -q -m "from the sandbox"
%[1]sgit push -q origin HEAD:refs/heads/from-sandbox
echo pushed`, noProxyOff, ca, repo))
		if r.code != 0 || !strings.Contains(r.stdout, "pushed") {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if got := git(t, fx.gitBare, "show", "from-sandbox:SANDBOX.md"); got != "pushed from the sandbox" {
			t.Errorf("the push did not land upstream: %q", got)
		}
		if !r.logged(t, "allow", "localhost", atoi(fx.gitUp.port), "") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		r.verify(t, dir)
	})

	t.Run("go", func(t *testing.T) {
		r := execIn(t, dir, "x", fmt.Sprintf(`%[1]s get https://localhost:%[2]s/go %[3]s; echo "exit=$?"
%[1]s get https://denied.test/ %[3]s; echo "exit=$?"`, client, fx.tlsUp.port, ca))
		if !strings.Contains(r.stdout, "status: 200\nbody: hello over tls /go\nexit=0") {
			t.Errorf("allowed host:\n%s%s", r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "kusaw: denied.test:443 is not allowed") || !strings.Contains(r.stdout, "exit=3") {
			t.Errorf("denied host:\n%s%s", r.stdout, r.stderr)
		}
		if !fx.tlsUp.saw("/go") || !r.logged(t, "refuse", "denied.test", 443, "host.not_allowed") {
			t.Errorf("upstream or egress.log: %v", r.egressLines(t))
		}
		r.verify(t, dir)
	})

	t.Run("node", func(t *testing.T) {
		need(t, "node")
		major, ver := nodeMajor(t)
		conns := fx.tlsUp.conns.Load()
		// A named host (not a local service, which the bridge would
		// forward): a client that ignores the proxy has no way to it.
		nd := fx.factory(t, "    allow_ranges: [127.0.0.0/8]", `  node:
    run: [node, fetch.mjs]
`)
		fx.dns.set("svc.test", "127.0.0.1")
		r := execIn(t, nd, "node", fmt.Sprintf(`cd %s && %sNODE_EXTRA_CA_CERTS=%s node fetch.mjs https://svc.test:%s/node`, fx.tools, noProxyOff, ca, fx.tlsUp.port))
		if major >= 24 {
			if r.code != 0 || !strings.Contains(r.stdout, "hello over tls /node") || !fx.tlsUp.saw("/node") {
				t.Errorf("node %s honours NODE_USE_ENV_PROXY, the fetch must work: %d\n%s%s", ver, r.code, r.stdout, r.stderr)
			}
		} else {
			if r.code == 0 || !strings.Contains(r.stdout, "fetch failed") || fx.tlsUp.saw("/node") || fx.tlsUp.conns.Load() != conns {
				t.Errorf("node %s's fetch ignores the proxy and must fail closed: %d\n%s%s", ver, r.code, r.stdout, r.stderr)
			}
			if r.logged(t, "allow", "svc.test", atoi(fx.tlsUp.port), "") {
				t.Error("node's request went through the proxy?")
			}
		}
		// validate names the cause: W1 for the node step.
		v := runKusaw(t, dir, "validate", "--json")
		if !strings.Contains(v.stdout, `"W1"`) || !strings.Contains(v.stdout, "step node runs node") {
			t.Errorf("validate does not name node as W1:\n%s", v.stdout)
		}
		r.verify(t, nd)
	})

	t.Run("direct", func(t *testing.T) {
		need(t, "bash")
		// A host port that no local-service entry lists: neither a direct
		// connection nor one through the proxy reaches it.
		far := newUpstream(t)
		fx.serveHTTP(t, far, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "far") })
		conns := far.conns.Load()
		r := execIn(t, dir, "x", fmt.Sprintf(`if bash -c 'echo x > /dev/tcp/127.0.0.1/%[1]s' 2>/dev/null; then echo devtcp-connected; else echo devtcp-failed; fi
if curl -s -m 3 --noproxy '*' http://127.0.0.1:%[1]s/direct >/dev/null 2>&1; then echo curl-connected; else echo curl-failed; fi
if %[2]s get http://127.0.0.1:%[1]s/ip %[3]s 2>&1 | grep -q 'status: 200'; then echo ip-connected; else echo ip-refused; fi`, far.port, client, ca))
		for _, want := range []string{"devtcp-failed", "curl-failed", "ip-refused"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("want %s:\n%s%s", want, r.stdout, r.stderr)
			}
		}
		if n := far.conns.Load() - conns; n != 0 {
			t.Errorf("the upstream saw %d direct connection(s)", n)
		}
		// Loopback through the proxy on a port no entry lists is refused.
		if !r.logged(t, "refuse", "127.0.0.1", atoi(far.port), "local.port_not_allowed") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		r.verify(t, dir)
	})

	t.Run("dns-loopback-refused", func(t *testing.T) {
		fx.dns.set("svc.test", "127.0.0.1")
		conns := fx.plainUp.conns.Load()
		r := execIn(t, dir, "x", fmt.Sprintf(`%scurl -sS http://svc.test:%s/dns`, noProxyOff, fx.plainUp.port))
		if strings.Contains(r.stdout, "hello over http") || !strings.Contains(r.stdout, "kusaw:") {
			t.Errorf("a name resolving to loopback was reached:\n%s%s", r.stdout, r.stderr)
		}
		if n := fx.plainUp.conns.Load() - conns; n != 0 || fx.plainUp.saw("/dns") {
			t.Errorf("the upstream saw %d connection(s)", n)
		}
		if !r.logged(t, "refuse", "svc.test", atoi(fx.plainUp.port), "address.") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		r.verify(t, dir)
	})

	t.Run("sni-mismatch", func(t *testing.T) {
		// A named host (svc.test, on loopback through allow_ranges): the
		// ClientHello must name it. Local services carry any protocol, so
		// the check is made on a name.
		d2 := fx.factory(t, "    allow_ranges: [127.0.0.0/8]", "")
		fx.dns.set("svc.test", "127.0.0.1")
		r := execIn(t, d2, "x", fmt.Sprintf(`%[1]s sni svc.test:%[2]s other.test %[3]s; echo "exit=$?"
%[1]s sni svc.test:%[2]s svc.test %[3]s; echo "exit=$?"`, client, fx.tlsUp.port, ca))
		if !strings.Contains(r.stdout, "handshake error") || !strings.Contains(r.stdout, "exit=4") {
			t.Errorf("a ClientHello naming another host was not closed:\n%s%s", r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "handshake ok\nexit=0") {
			t.Errorf("the twin with the right name failed:\n%s%s", r.stdout, r.stderr)
		}
		if !r.logged(t, "close", "svc.test", atoi(fx.tlsUp.port), "sni.mismatch") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		r.verify(t, d2)
	})

	t.Run("websocket", func(t *testing.T) {
		r := execIn(t, dir, "x", fmt.Sprintf(`%s ws http://localhost:%s/ws`, client, fx.wsUp.port))
		if r.code != 0 || !strings.Contains(r.stdout, "status: 101") || !strings.Contains(r.stdout, "echo: ping through the proxy") {
			t.Errorf("websocket: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if !fx.wsUp.saw("/ws") || !r.logged(t, "allow", "localhost", atoi(fx.wsUp.port), "") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		r.verify(t, dir)
	})

	t.Run("exact-bytes", func(t *testing.T) {
		r := execIn(t, dir, "x", fmt.Sprintf(`%s exact %d 25 http://localhost:%s/exact localhost:%s %s`, client, exactN, fx.exactHTTP.port, fx.exactTLS.port, ca))
		if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("exact: 25 rounds of %d bytes, 0 wrong", exactN)) {
			t.Errorf("exact bytes: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if !r.logged(t, "allow", "localhost", atoi(fx.exactHTTP.port), "") || !r.logged(t, "allow", "localhost", atoi(fx.exactTLS.port), "") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		// Every tunnel is logged with its bytes down: at least exactN each.
		tunnels := 0
		for _, m := range r.egressLines(t) {
			if p, _ := m["port"].(float64); int(p) == atoi(fx.exactTLS.port) && m["decision"] == "allow" {
				tunnels++
				if down, _ := m["bytes_down"].(float64); down < exactN {
					t.Errorf("a tunnel logged %v bytes down, want at least %d", down, exactN)
				}
			}
		}
		if tunnels != 25 {
			t.Errorf("egress.log has %d tunnels to the exact upstream, want 25", tunnels)
		}
		r.verify(t, dir)
	})

	t.Run("allow-ranges-and-budget", func(t *testing.T) {
		d2 := fx.factory(t, "    allow_ranges: [127.0.0.0/8]\n    budgets: {per_host: 64KiB}", "")
		fx.dns.set("svc.test", "127.0.0.1")
		r := execIn(t, d2, "x", fmt.Sprintf(`%scurl -sS http://svc.test:%s/ranges`, noProxyOff, fx.plainUp.port))
		if r.code != 0 || !strings.Contains(r.stdout, "hello over http /ranges") {
			t.Errorf("with allow_ranges the name must be reached: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if !r.logged(t, "allow", "svc.test", atoi(fx.plainUp.port), "") {
			t.Errorf("egress.log: %v", r.egressLines(t))
		}
		r.verify(t, d2)

		// A 1 MiB upload crosses the 64 KiB per-host budget: the tunnel
		// is closed and egress.blocked emitted.
		b := execIn(t, d2, "x", fmt.Sprintf(`head -c 1048576 /dev/zero > "$TMPDIR/big"
%scurl -sS --cacert %s --data-binary @"$TMPDIR/big" https://localhost:%s/upload`, noProxyOff, ca, fx.tlsUp.port))
		if b.code == 0 {
			t.Errorf("the upload over budget worked:\n%s%s", b.stdout, b.stderr)
		}
		if !b.logged(t, "close", "localhost", atoi(fx.tlsUp.port), "budget.per_host") {
			t.Errorf("egress.log: %v", b.egressLines(t))
		}
		ev := readFile(t, filepath.Join(b.adir, "events.jsonl"))
		if !strings.Contains(ev, `"type":"egress.blocked"`) || !strings.Contains(ev, "budget.per_host") {
			t.Errorf("no egress.blocked for the budget:\n%s", ev)
		}
		b.verify(t, d2)
	})
}

func nodeMajor(t *testing.T) (int, string) {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(out))
	m, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	return atoi(m), v
}

// TestEgressInjectEndToEnd: the fake Claude calls a fake Messages API
// through inject. The API gets the real key; the sandbox's env and the
// attempt's records only ever hold the placeholder.
func TestEgressInjectEndToEnd(t *testing.T) {
	needSandbox(t)
	need(t, "go")
	fakes := providertest.BuildT(t)
	const realKey = "sk-ant-e2e-REAL-key-4711"
	api := providertest.NewMessagesAPI(t, "answer from the fake API")
	api.WantKey = realKey
	fx := &egressFixture{tools: t.TempDir()}
	fx.makeCA(t)
	// The fake API speaks plain HTTP; inject forwards over verified TLS,
	// so a TLS front with the test CA stands before it.
	target, _ := url.Parse(api.URL)
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{fx.leaf}}
	front.StartTLS()
	t.Cleanup(front.Close)
	_, port, _ := net.SplitHostPort(front.Listener.Addr().String())
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {command: `+fakes.Claude+`, base_url: "https://localhost:`+port+`"}
sandbox:
  egress:
    inject: provider
    # The fake API lives on the host's loopback: base_url on localhost is
    # a local service, so no allow_ranges is needed.
pipelines:
  default: [ask]
steps:
  ask:
    prompt: say something
    sandbox: {mode: required, network: allowlist}
    env:
      FAKE_AGENT_SCENARIO: call_api
      FAKE_AGENT_ENV_FILE: agent-env.json
`, "app")
	set := exec.Command(kusawBin, "config", "set", "providers.claude-code.api_key", "--secret")
	set.Dir = dir
	set.Env = testEnv(t, dir)
	set.Stdin = strings.NewReader(realKey + "\n")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("kusaw config set --secret: %v\n%s", err, out)
	}
	if strings.Contains(readFile(t, filepath.Join(dir, "factory.yaml")), realKey) {
		t.Fatal("the key was written into factory.yaml")
	}
	res := runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + fx.caPEM}, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	reqs := api.Requests()
	if len(reqs) == 0 || reqs[len(reqs)-1].Header.Get("x-api-key") != realKey {
		t.Fatalf("the API did not receive the real key: %d request(s)", len(reqs))
	}
	id := onlyRun(t, dir)
	var env map[string]string
	if err := json.Unmarshal([]byte(git(t, filepath.Join(dir, "app"), "show", "kusaw/"+id+":agent-env.json")), &env); err != nil {
		t.Fatal(err)
	}
	if env["ANTHROPIC_API_KEY"] != "factory-egress-placeholder" || !strings.Contains(env["ANTHROPIC_BASE_URL"], "127.0.0.1") {
		t.Errorf("the sandbox's env: key %q base %q", env["ANTHROPIC_API_KEY"], env["ANTHROPIC_BASE_URL"])
	}
	for k, v := range env {
		if strings.Contains(v, realKey) {
			t.Errorf("the real key is in the sandbox's env as %s", k)
		}
	}
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "ask", "1")
	if hits := grepDir(t, filepath.Join(dir, ".kusaw"), realKey); len(hits) > 0 {
		t.Errorf("the real key is in the records: %v", hits)
	}
	if !strings.Contains(readFile(t, filepath.Join(adir, "stdout.log")), "answer from the fake API") {
		t.Error("the agent's answer did not come from the API")
	}
	if !strings.Contains(readFile(t, filepath.Join(adir, "egress.log")), `"kind":"inject"`) {
		t.Errorf("egress.log has no inject decision:\n%s", readFile(t, filepath.Join(adir, "egress.log")))
	}
	if v := runKusaw(t, dir, "log", "verify", "--strict", filepath.Join(adir, "egress.log"), filepath.Join(adir, "events.jsonl")); v.code != 0 {
		t.Errorf("kusaw log verify: %d %s%s", v.code, v.stdout, v.stderr)
	}
}

// grepDir lists the files under dir that contain s.
func grepDir(t *testing.T, dir, s string) []string {
	var hits []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || fi.Mode()&os.ModeType != 0 {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
			hits = append(hits, p)
		}
		return nil
	})
	sort.Strings(hits)
	return hits
}
