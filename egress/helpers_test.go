package egress

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/kusaw/kusaw/config"
)

// stubDNS answers A and AAAA queries for test names from a table, on
// loopback UDP and TCP. Unknown names get NXDOMAIN, so a test can never
// reach a real address through the proxy's resolver.
type stubDNS struct {
	addr    string
	mu      sync.Mutex
	answers map[string]func(dnsmessage.Type) []netip.Addr
	queries map[string]int
}

func newStubDNS(t testing.TB) *stubDNS {
	t.Helper()
	// UDP and TCP on one port; retry when the TCP side of a free UDP
	// port is taken.
	var pc net.PacketConn
	var tl net.Listener
	for i := 0; ; i++ {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tl, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		if i == 20 {
			t.Fatal(err)
		}
	}
	s := &stubDNS{addr: pc.LocalAddr().String(), answers: map[string]func(dnsmessage.Type) []netip.Addr{}, queries: map[string]int{}}
	t.Cleanup(func() { pc.Close(); tl.Close() })
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
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				msg := make([]byte, int(l[0])<<8|int(l[1]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				out := s.answer(msg)
				c.Write(append([]byte{byte(len(out) >> 8), byte(len(out))}, out...))
			}()
		}
	}()
	return s
}

func (s *stubDNS) set(name string, addrs ...string) {
	list := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		list[i] = netip.MustParseAddr(a)
	}
	s.setFunc(name, func(dnsmessage.Type) []netip.Addr { return list })
}

// setFunc answers name with f, called once per question (A and AAAA are
// separate questions).
func (s *stubDNS) setFunc(name string, f func(dnsmessage.Type) []netip.Addr) {
	s.mu.Lock()
	s.answers[strings.ToLower(name)+"."] = f
	s.mu.Unlock()
}

func (s *stubDNS) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[strings.ToLower(name)+"."]
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
	name := strings.ToLower(q.Name.String())
	s.mu.Lock()
	f := s.answers[name]
	s.queries[name]++
	s.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionAvailable: true}
	if f == nil {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	if f != nil {
		for _, a := range f(q.Type) {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
			if a.Is4() && q.Type == dnsmessage.TypeA {
				b.AResource(rr, dnsmessage.AResource{A: a.As4()})
			}
			if a.Is6() && q.Type == dnsmessage.TypeAAAA {
				b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// testCA is a throwaway CA with one leaf for the test names.
type testCA struct {
	pool *x509.CertPool
	cert tls.Certificate
}

var (
	caOnce sync.Once
	ca     testCA
)

func getCA(t testing.TB) testCA {
	caOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: "kusaw egress test"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			BasicConstraintsValid: true,
			IsCA:                  true,
			DNSNames:              []string{"allowed.test", "*.allowed.test", "other.test", "api.inject.test", "bench.test", "rebind.test"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		c, _ := x509.ParseCertificate(der)
		ca.pool = x509.NewCertPool()
		ca.pool.AddCert(c)
		ca.cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}
	})
	return ca
}

// countingListener counts accepted connections and the raw bytes they
// carry, so tests can tell exactly what reached an upstream.
type countingListener struct {
	net.Listener
	accepts  atomic.Int64
	bytesIn  atomic.Int64
	bytesOut atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepts.Add(1)
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.bytesIn.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.bytesOut.Add(int64(n))
	return n, err
}

func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func listenCounting(t testing.TB, addr string) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &countingListener{Listener: ln}
}

func portOf(t testing.TB, addr string) int {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return int(ap.Port())
}

// recorder is an Observer that keeps every decision.
type recorder struct {
	mu sync.Mutex
	ds []Decision
	ch chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1000)} }

func (r *recorder) Decision(d Decision) {
	r.mu.Lock()
	r.ds = append(r.ds, d)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recorder) all() []Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Decision(nil), r.ds...)
}

// wait returns the first decision matching f, waiting up to 5s.
func (r *recorder) wait(t testing.TB, what string, f func(Decision) bool) Decision {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		for _, d := range r.all() {
			if f(d) {
				return d
			}
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("no decision %s; got %+v", what, r.all())
			return Decision{}
		}
	}
}

// env is one proxy with a stub resolver and a lease listening on the
// host's loopback; dials to anything but loopback fail the test.
type env struct {
	t   testing.TB
	dns *stubDNS
	p   *Proxy
	l   *Lease
	rec *recorder
}

func rules(t testing.TB, entries ...string) []Rule {
	t.Helper()
	var out []Rule
	for _, e := range entries {
		h, err := config.ParseHostPattern(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Rule{Pattern: h, Origin: "factory"})
	}
	return out
}

func newEnv(t testing.TB, o Options, c LeaseConfig) *env {
	t.Helper()
	e := &env{t: t, dns: newStubDNS(t), rec: newRecorder()}
	o.Resolver = e.dns.addr
	p, err := NewProxy(o)
	if err != nil {
		t.Fatal(err)
	}
	p.dialCheck = func(a netip.Addr) error {
		if !a.Unmap().IsLoopback() {
			t.Errorf("the proxy tried to dial %s, which is not loopback", a)
			return fmt.Errorf("test: refusing to dial %s", a)
		}
		return nil
	}
	e.p = p
	if c.ID == "" {
		c.ID = "run1/test/1"
	}
	if c.Listen == "" && c.SocketDir == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.Observer == nil {
		c.Observer = e.rec
	}
	if c.RootCAs == nil {
		c.RootCAs = getCA(t).pool
	}
	if c.PolicyKey == "" {
		c.PolicyKey = "steps.test.sandbox.egress.allow"
	}
	l, err := p.Lease(c)
	if err != nil {
		t.Fatal(err)
	}
	e.l = l
	t.Cleanup(func() { p.Close() })
	return e
}

// client is an HTTP client that uses the lease as its proxy and trusts
// the test CA.
func (e *env) client() *http.Client {
	u, _ := url.Parse(e.l.ProxyURL())
	return &http.Client{
		Transport: &http.Transport{
			Proxy:              http.ProxyURL(u),
			TLSClientConfig:    &tls.Config{RootCAs: getCA(e.t).pool},
			DisableKeepAlives:  true,
			DisableCompression: true,
		},
		Timeout: 10 * time.Second,
	}
}

// connect sends CONNECT target and returns the conn, its reader and the
// proxy's response.
func (e *env) connect(target string, early []byte) (net.Conn, *bufio.Reader, *http.Response) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.l.ListenAddr())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	if _, err := c.Write(append([]byte(req), early...)); err != nil {
		e.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		e.t.Fatalf("CONNECT %s: %v", target, err)
	}
	return c, br, resp
}

// tlsUpstream serves h over TLS with the test certificate.
func tlsUpstream(t testing.TB, h http.Handler) *countingListener {
	t.Helper()
	cl := listenCounting(t, "127.0.0.1:0")
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{getCA(t).cert}}, ErrorLog: discardLog}
	go srv.ServeTLS(cl, "", "")
	t.Cleanup(func() { srv.Close() })
	return cl
}

func plainUpstream(t testing.TB, h http.Handler) *countingListener {
	t.Helper()
	cl := listenCounting(t, "127.0.0.1:0")
	srv := &http.Server{Handler: h, ErrorLog: discardLog}
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })
	return cl
}

func readBody(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// requireCI fails instead of skipping when CI=true.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

var loopback8 = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// eventually polls cond for up to 5s: counters on the far side of a
// socket settle a moment after the bytes arrive.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
