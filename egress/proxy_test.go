package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func hello(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from "+r.Host) }

func TestConnectAllowedHost(t *testing.T) {
	up := tlsUpstream(t, http.HandlerFunc(hello))
	port := portOf(t, up.Addr().String())
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+strconv.Itoa(port)), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")

	resp, err := e.client().Get(fmt.Sprintf("https://allowed.test:%d/x", port))
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "hello from allowed.test") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	d := e.rec.wait(t, "allow", func(d Decision) bool { return d.Decision == Allow })
	if d.Kind != KindConnect || d.Host != "allowed.test" || d.Port != port || d.BytesUp == 0 || d.BytesDown == 0 ||
		len(d.Addrs) != 1 || d.Addrs[0] != "127.0.0.1" || d.Rule != "allowed.test:"+strconv.Itoa(port)+" (factory)" || d.Lease != "run1/test/1" {
		t.Fatalf("decision %+v", d)
	}
	s := e.l.Close()
	if len(s.Hosts) != 1 || s.Hosts[0].Connections != 1 || s.Hosts[0].BytesUp != d.BytesUp || s.Refusals != 0 {
		t.Fatalf("summary %+v", s)
	}
}

// Each refusal must come before any dial: the upstream sees no connection.
func TestConnectRefusals(t *testing.T) {
	up := listenCounting(t, "127.0.0.1:0")
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port, "*.allowed.test:"+port, "private.test:"+port, "meta.test:"+port, "azure.test:"+port, "gone.test:"+port)})
	e.dns.set("allowed.test", "127.0.0.1") // loopback, and no allow_ranges
	e.dns.set("a.allowed.test", "127.0.0.1", "::1")
	e.dns.set("private.test", "10.1.2.3")
	e.dns.set("meta.test", "169.254.169.254")
	e.dns.set("azure.test", "::ffff:168.63.129.16")
	e.dns.set("evil.test", "127.0.0.1")
	cases := []struct {
		target, reason, line string
		status               int
	}{
		{"evil.test:" + port, ReasonNotAllowed, "kusaw: evil.test:" + port + " is not allowed; add it to steps.test.sandbox.egress.allow", 403},
		{"allowed.test:443", ReasonPortNotAllowed, "is not allowed: allowed.test:" + port + " admits port " + port + " only; add allowed.test to", 403},
		{"ALLOWED.test.:" + port, ReasonAddress, "resolves to 127.0.0.1, a loopback address", 403},
		{"a.allowed.test:" + port, ReasonAddress, "a loopback address", 403},
		{"private.test:" + port, ReasonAddress, "resolves to 10.1.2.3, a private address; if that range is yours add it to sandbox.egress.allow_ranges", 403},
		{"meta.test:" + port, ReasonAddress, "a cloud metadata address", 403},
		{"azure.test:" + port, ReasonAddress, "168.63.129.16, a cloud metadata address (Azure)", 403},
		{"127.0.0.1:" + port, ReasonLocalPort, "is the host's loopback, and port " + port + " is not a local service of this step; add localhost:" + port + " to steps.test.sandbox.egress.allow", 403},
		{"[::1]:" + port, ReasonLocalPort, "is the host's loopback", 403},
		{"localhost:" + port, ReasonLocalPort, "is the host's loopback", 403},
		{"127.0.0.2:" + port, ReasonIPLiteral, "is an IP address", 403},
		{"2130706433:" + port, ReasonIPLiteral, "is an IP address", 403},
		{"0x7f.1:" + port, ReasonIPLiteral, "is an IP address", 403},
		{"metadata.google.internal:80", ReasonMetadata, "cloud metadata", 403},
		{"gone.test:" + port, ReasonResolve, "cannot resolve gone.test: no such host", 502},
	}
	for _, c := range cases {
		_, _, resp := e.connect(c.target, nil)
		body := readBody(t, resp.Body)
		if resp.StatusCode != c.status || !strings.Contains(resp.Status, c.line) || !strings.Contains(body, c.line) || strings.Count(body, "\n") != 1 {
			t.Errorf("CONNECT %s: %q / %q, want %d with %q", c.target, resp.Status, body, c.status, c.line)
		}
		d := e.rec.wait(t, c.reason, func(d Decision) bool { return d.Reason == c.reason && strings.Contains(d.Detail, c.line) })
		if d.Kind != KindConnect || (c.status == 403) != d.Blocked() {
			t.Errorf("CONNECT %s: decision %+v", c.target, d)
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the upstream saw %d connections; refusals must come before any dial", n)
	}
	if e.dns.count("allowed.test") == 0 {
		t.Fatal("the stub resolver was not asked: the loopback answer was not what got refused")
	}
	if e.dns.count("evil.test") != 0 {
		t.Fatal("a host that is not allowed was resolved")
	}
	s := e.l.Close()
	if s.Refusals != len(cases)-1 { // the resolve failure is not a refusal
		t.Fatalf("summary counts %d refusals, want %d: %+v", s.Refusals, len(cases)-1, s)
	}
}

// The legitimate twin of the loopback refusal: allow_ranges opens it.
func TestAllowRangesAdmitsPrivateAnswer(t *testing.T) {
	up := tlsUpstream(t, http.HandlerFunc(hello))
	port := portOf(t, up.Addr().String())
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "*.allowed.test:"+strconv.Itoa(port)), AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	e.dns.set("a.allowed.test", "127.0.0.1")
	resp, err := e.client().Get(fmt.Sprintf("https://a.allowed.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
}

func TestCheckAddr(t *testing.T) {
	private := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("0.0.0.0/0")}
	cases := []struct {
		addr    string
		allow   []netip.Prefix
		refused string
	}{
		{"93.184.216.34", nil, ""},
		{"2606:2800:220:1:248:1893:25c8:1946", nil, ""},
		{"10.0.0.1", nil, "a private address"},
		{"10.0.0.1", private, ""},
		{"::ffff:10.0.0.1", nil, "a private address"},
		{"::ffff:10.0.0.1", private, ""},
		{"172.16.5.4", nil, "a private address"},
		{"192.168.1.1", nil, "a private address"},
		{"127.0.0.1", nil, "a loopback address"},
		{"::ffff:127.0.0.1", nil, "a loopback address"},
		{"::1", nil, "a loopback address"},
		{"100.64.0.1", nil, "a carrier-grade NAT address"},
		{"100.100.100.200", private, "a cloud metadata address (Alibaba)"},
		{"169.254.169.254", private, "a cloud metadata address"},
		{"169.254.1.1", private, "a link-local address"},
		{"168.63.129.16", private, "a cloud metadata address (Azure)"},
		{"::ffff:169.254.169.254", private, "a cloud metadata address"},
		{"fd00:ec2::254", private, "a cloud metadata address (AWS)"},
		{"fe80::1%eth0", private, "a link-local address"},
		{"0.0.0.0", private, "an unspecified address"},
		{"::", private, "an unspecified address"},
		{"224.0.0.1", private, "a multicast address"},
		{"ff02::1", private, "a multicast address"},
		{"192.0.2.1", nil, "a documentation address"},
		{"198.51.100.7", nil, "a documentation address"},
		{"203.0.113.9", nil, "a documentation address"},
		{"2001:db8::1", nil, "a documentation address"},
		{"198.18.0.1", nil, "a benchmarking address"},
		{"2001:2::1", nil, "a benchmarking address"},
		{"64:ff9b::a00:1", nil, "a NAT64 address"},
		{"2002:a00:1::1", nil, "a 6to4 address"},
		{"192.88.99.1", nil, "a 6to4 relay address"},
		{"2001:0:4136:e378::1", nil, "a Teredo address"},
		{"fd12:3456::1", nil, "a unique local address"},
		{"fd12:3456::1", private, ""},
		{"240.0.0.1", nil, "a reserved address"},
		{"255.255.255.255", nil, "a reserved address"},
		{"192.0.0.8", nil, "a reserved address"},
		{"::a00:1", nil, "an IPv4-compatible address"},
		{"100::1", nil, "a discard address"},
		{"4000::1", nil, "not a global unicast address"},
	}
	for _, c := range cases {
		if got := checkAddr(netip.MustParseAddr(c.addr), c.allow); got != c.refused {
			t.Errorf("checkAddr(%s, %v) = %q, want %q", c.addr, c.allow, got, c.refused)
		}
	}
}

// DNS rebinding: the stub answers a good address, then a bad one, in
// turn. Every connection goes to the address that was checked; the bad
// one is refused and never dialed.
func TestRebindingDialsTheCheckedAddress(t *testing.T) {
	good := tlsUpstream(t, http.HandlerFunc(hello))
	port := portOf(t, good.Addr().String())
	bad := listenCounting(t, "127.0.0.3:"+strconv.Itoa(port))
	e := newEnv(t, Options{DNSCacheTTL: -1}, LeaseConfig{Allow: rules(t, "rebind.test:"+strconv.Itoa(port)), AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	var n atomic.Int64
	e.dns.setFunc("rebind.test", func(qt dnsmessage.Type) []netip.Addr {
		if qt != dnsmessage.TypeA {
			return nil
		}
		if n.Add(1)%2 == 0 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.3")}
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	})
	ok, refused := 0, 0
	for i := 0; i < 10; i++ {
		resp, err := e.client().Get(fmt.Sprintf("https://rebind.test:%d/", port))
		if err != nil {
			// Go's client shows the status text of a refused CONNECT.
			if !strings.Contains(err.Error(), "kusaw: rebind.test:"+strconv.Itoa(port)+" resolves to 127.0.0.3") {
				t.Fatal(err)
			}
			refused++
			continue
		}
		resp.Body.Close()
		ok++
	}
	if ok == 0 || refused == 0 {
		t.Fatalf("ok %d refused %d: the stub did not alternate", ok, refused)
	}
	if bad.accepts.Load() != 0 {
		t.Fatal("the proxy dialed the rebound address")
	}
	if good.accepts.Load() != int64(ok) {
		t.Fatalf("good upstream accepts %d, want %d", good.accepts.Load(), ok)
	}
}

func TestLocalhostIsLoopbackWithoutDNS(t *testing.T) {
	up := plainUpstream(t, http.HandlerFunc(hello))
	port := portOf(t, up.Addr().String())
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "localhost:"+strconv.Itoa(port))})
	e.dns.set("localhost", "10.9.9.9") // must not be asked
	resp, err := e.client().Get(fmt.Sprintf("http://localhost:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body, "hello") {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if e.dns.count("localhost") != 0 {
		t.Fatal("localhost was looked up")
	}
	// A wildcard that is not localhost does not open loopback.
	resp, err = e.client().Get(fmt.Sprintf("http://localhost:%d/", port+1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("localhost on another port: %s", resp.Status)
	}
}

func TestPlainHTTPForward(t *testing.T) {
	var gotHost, gotPath, gotProxyAuth atomic.Value
	up := plainUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost.Store(r.Host)
		gotPath.Store(r.URL.RequestURI())
		gotProxyAuth.Store(r.Header.Get("Proxy-Authorization"))
		io.WriteString(w, "plain ok")
	}))
	port := portOf(t, up.Addr().String())
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+strconv.Itoa(port)), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://allowed.test:%d/a/b?c=d", port), nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body != "plain ok" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if gotHost.Load() != fmt.Sprintf("allowed.test:%d", port) || gotPath.Load() != "/a/b?c=d" || gotProxyAuth.Load() != "" {
		t.Fatalf("upstream saw host %v path %v proxy-auth %v", gotHost.Load(), gotPath.Load(), gotProxyAuth.Load())
	}
	d := e.rec.wait(t, "http allow", func(d Decision) bool { return d.Kind == KindHTTP && d.Decision == Allow })
	eventually(t, fmt.Sprintf("wire counts: decision %+v, upstream in %d out %d", d, up.bytesIn.Load(), up.bytesOut.Load()), func() bool { return d.BytesUp == up.bytesIn.Load() && d.BytesDown == up.bytesOut.Load() })

	// Refused plain requests get the same 403 line; Go's client shows the status.
	resp, err = e.client().Get("http://evil.test/")
	if err != nil {
		t.Fatal(err)
	}
	body = readBody(t, resp.Body)
	resp.Body.Close()
	want := "kusaw: evil.test:80 is not allowed; add it to steps.test.sandbox.egress.allow"
	if resp.StatusCode != 403 || resp.Status != "403 "+want || body != want+"\n" {
		t.Fatalf("%q %q", resp.Status, body)
	}
	// https:// in absolute form and origin-form requests are not proxied.
	for _, raw := range []string{
		"GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"GET http://127.0.0.1:" + strconv.Itoa(port) + "/ HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, err := net.Dial("tcp", e.l.ListenAddr())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || (resp.StatusCode != 400 && resp.StatusCode != 403) {
			t.Fatalf("%q: %v %v", raw, resp, err)
		}
	}
	if up.accepts.Load() != 1 {
		t.Fatalf("upstream accepts %d, want 1", up.accepts.Load())
	}
}

func TestUpstreamFailures(t *testing.T) {
	// A port with nothing listening: bind and close to find one.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := strconv.Itoa(portOf(t, ln.Addr().String()))
	ln.Close()
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	_, _, resp := e.connect("allowed.test:"+port, nil)
	if resp.StatusCode != 502 || !strings.Contains(resp.Status, "cannot reach allowed.test:"+port+": connection refused") {
		t.Fatalf("CONNECT to a closed port: %q", resp.Status)
	}
	resp2, err := e.client().Get("http://allowed.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 502 || !strings.Contains(resp2.Status, "connection refused") {
		t.Fatalf("plain GET to a closed port: %q", resp2.Status)
	}
	d := e.rec.wait(t, "fail", func(d Decision) bool { return d.Decision == Fail && d.Reason == ReasonUnreachable })
	if d.Blocked() {
		t.Fatal("an unreachable upstream is not a policy refusal")
	}

	// A dial that cannot finish in time is a 504.
	e2 := newEnv(t, Options{DialTimeout: time.Nanosecond}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e2.dns.set("allowed.test", "127.0.0.1")
	_, _, resp = e2.connect("allowed.test:"+port, nil)
	if resp.StatusCode != 504 || !strings.Contains(resp.Status, "did not answer within") {
		t.Fatalf("CONNECT with a timed-out dial: %q", resp.Status)
	}
}

// tlsTunnel opens a CONNECT tunnel and a TLS client over it.
func (e *env) tlsTunnel(target, sni string) (*tls.Conn, net.Conn) {
	e.t.Helper()
	c, br, resp := e.connect(target, nil)
	if resp.StatusCode != 200 {
		e.t.Fatalf("CONNECT %s: %s", target, resp.Status)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: sni, RootCAs: getCA(e.t).pool})
	return tc, c
}

// bufConn reads through a bufio.Reader that may hold bytes already.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func TestSNIMustNameTheConnectHost(t *testing.T) {
	up := tlsUpstream(t, http.HandlerFunc(hello))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port, "other.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	e.dns.set("other.test", "127.0.0.1")

	// Attack: tunnel to an allowed host, name another in TLS.
	tc, _ := e.tlsTunnel("allowed.test:"+port, "other.test")
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS handshake naming another host went through")
	}
	d := e.rec.wait(t, "sni mismatch", func(d Decision) bool { return d.Reason == ReasonSNIMismatch })
	if d.Decision != Close || !strings.Contains(d.Detail, `names "other.test"`) || d.BytesUp != 0 {
		t.Fatalf("decision %+v", d)
	}
	// Attack: no SNI at all (an IP-style ServerName sends none).
	tc, _ = e.tlsTunnel("allowed.test:"+port, "127.0.0.1")
	if err := tc.Handshake(); err == nil {
		t.Fatal("a ClientHello without SNI went through")
	}
	e.rec.wait(t, "sni missing", func(d Decision) bool { return d.Reason == ReasonSNIMissing })
	// Attack: bytes that are not TLS.
	c, br, resp := e.connect("allowed.test:"+port, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if n, _ := br.Read(make([]byte, 10)); n != 0 {
		t.Fatal("plain HTTP in a :443-style tunnel got an answer")
	}
	e.rec.wait(t, "not tls", func(d Decision) bool { return d.Reason == ReasonNotTLS })
	// Twin: case and a trailing dot in the CONNECT host still match the SNI.
	tc, _ = e.tlsTunnel("Allowed.TEST.:"+port, "allowed.test")
	if err := tc.Handshake(); err != nil {
		t.Fatalf("legitimate handshake: %v", err)
	}
	tc.Close()
	if up.bytesIn.Load() == 0 {
		t.Fatal("the legitimate tunnel did not reach the upstream")
	}
}

// captureHello returns the records of a real ClientHello for host.
func captureHello(t testing.TB, host string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		tls.Client(a, &tls.Config{ServerName: host, InsecureSkipVerify: true}).Handshake()
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(b, hdr[:]); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, rec); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	return append(hdr[:], rec...)
}

// fragment re-splits one handshake record into records of size n.
func fragment(record []byte, n int) []byte {
	body := record[5:]
	var out []byte
	for len(body) > 0 {
		k := min(n, len(body))
		out = append(out, 0x16, record[1], record[2], byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	return out
}

func TestReadClientHello(t *testing.T) {
	rec := captureHello(t, "allowed.test")
	for _, n := range []int{1, 2, 3, 7, 50, 100, 16384} {
		raw := fragment(rec, n)
		got, sni, err := readClientHello(strings.NewReader(string(raw) + "trailing"))
		if err != nil || sni != "allowed.test" || string(got) != string(raw) {
			t.Fatalf("fragments of %d: sni %q err %v same %v", n, sni, err, string(got) == string(raw))
		}
	}
	bad := [][]byte{
		nil,
		[]byte("GET / HTTP/1.1\r\n"),
		{0x16, 3, 1, 0, 0},
		{0x16, 3, 1, 0xff, 0xff},
		{0x16, 3, 1, 0, 4, 2, 0, 0, 0},
		rec[:len(rec)-1],
	}
	for _, b := range bad {
		if _, sni, err := readClientHello(strings.NewReader(string(b))); err == nil && sni != "" {
			t.Errorf("%x: read SNI %q", b, sni)
		}
	}
	// Records other than handshake in the middle stop the read.
	mixed := append(fragment(rec, 20)[:25], 0x17, 3, 3, 0, 1, 0)
	if _, _, err := readClientHello(strings.NewReader(string(mixed))); err == nil {
		t.Fatal("an application-data record inside the ClientHello was accepted")
	}
}

// A ClientHello split across many records passes the SNI check and
// reaches the upstream byte for byte; one naming another host does not.
func TestSplitClientHelloThroughTunnel(t *testing.T) {
	up := listenCounting(t, "127.0.0.1:0")
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	got := make(chan []byte, 1)
	go func() {
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 0, 4096)
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			b = append(b, buf[:n]...)
			if err != nil || strings.HasSuffix(string(b), "END") {
				break
			}
		}
		got <- b
	}()
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	raw := fragment(captureHello(t, "allowed.test"), 37)
	// The whole hello goes with the CONNECT, before the 200 is read.
	c, _, resp := e.connect("allowed.test:"+port, append(raw, "END"...))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	b := <-got
	if string(b) != string(raw)+"END" {
		t.Fatalf("upstream got %d bytes, want %d", len(b), len(raw)+3)
	}
	c.Close()
}

func TestBufferedBytesAfterConnectAndHalfClose(t *testing.T) {
	// The upstream reads the client's TLS stream to its end, checks the
	// TCP FIN arrived too (half-close relayed), then answers.
	up := listenCounting(t, "127.0.0.1:0")
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	errs := make(chan error, 1)
	go func() {
		raw, err := up.Accept()
		if err != nil {
			errs <- err
			return
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{getCA(t).cert}})
		n, err := io.Copy(io.Discard, tc)
		if err != nil {
			errs <- fmt.Errorf("upstream read: %v", err)
			return
		}
		if _, err := raw.Read(make([]byte, 1)); err != io.EOF {
			errs <- fmt.Errorf("after close_notify the upstream saw %v, not the FIN", err)
			return
		}
		fmt.Fprintf(tc, "got %d", n)
		tc.Close()
		errs <- nil
	}()
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	c, br, resp := e.connect("allowed.test:"+port, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "allowed.test", RootCAs: getCA(t).pool})
	if _, err := tc.Write([]byte(strings.Repeat("x", 100000))); err != nil {
		t.Fatal(err)
	}
	// tls.Conn.CloseWrite sends close_notify only; the FIN is separate.
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	reply := readBody(t, tc)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if reply != "got 100000" {
		t.Fatalf("reply %q", reply)
	}
}

func TestIdleTunnelCloses(t *testing.T) {
	up := tlsUpstream(t, http.HandlerFunc(hello))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{IdleTimeout: 300 * time.Millisecond}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	tc, c := e.tlsTunnel("allowed.test:"+port, "allowed.test")
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from an idle tunnel")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("idle tunnel closed after %s", el)
	}
	d := e.rec.wait(t, "idle", func(d Decision) bool { return d.Reason == ReasonIdle })
	if d.Decision != Allow || d.Blocked() {
		t.Fatalf("%+v", d)
	}
}

// A tunnel that keeps moving bytes one way is not idle.
func TestOneWayTransferIsNotIdle(t *testing.T) {
	up := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 8; i++ {
			io.WriteString(w, "tick\n")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{IdleTimeout: 250 * time.Millisecond}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	resp, err := e.client().Get("https://allowed.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp.Body)
	resp.Body.Close()
	if strings.Count(body, "tick") != 8 {
		t.Fatalf("body %q", body)
	}
}

func TestHTTPInsideConnectToPlainPort(t *testing.T) {
	var hosts []string
	up := plainUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts = append(hosts, r.Host)
		io.WriteString(w, "ok "+r.URL.Path)
	}))
	port := portOf(t, up.Addr().String())
	ps := strconv.Itoa(port)
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+ps), AllowRanges: loopback8})
	e.p.plainTunnelPort = port // stands in for 80, which a test cannot bind
	e.dns.set("allowed.test", "127.0.0.1")
	c, br, resp := e.connect("allowed.test:"+ps, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	for _, p := range []string{"/one", "/two"} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", p, port)
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b := readBody(t, r.Body); b != "ok "+p {
			t.Fatalf("%s: %q", p, b)
		}
	}
	// A request for another host in the same tunnel is refused.
	fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode != 403 || !strings.Contains(r.Status, `is for "evil.test"`) {
		t.Fatalf("%q", r.Status)
	}
	e.rec.wait(t, "in-tunnel refusal", func(d Decision) bool { return d.Decision == Close && d.Reason == ReasonNotAllowed })
	if len(hosts) != 2 {
		t.Fatalf("upstream saw %v", hosts)
	}
	// On any other port plain HTTP is not relayed.
	e.p.plainTunnelPort = 80
	c, _, resp = e.connect("allowed.test:"+ps, nil)
	fmt.Fprintf(c, "GET /three HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if n, _ := c.Read(make([]byte, 10)); n != 0 {
		t.Fatal("plain HTTP went through a tunnel to a TLS port")
	}
	if len(hosts) != 2 {
		t.Fatalf("upstream saw %v", hosts)
	}
}

// wsUpstream answers a WebSocket-style upgrade and then echoes raw bytes.
func wsUpstream(t testing.TB) *countingListener {
	return plainUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		io.Copy(c, brw.Reader)
	}))
}

func TestWebSocketRelayedAndCounted(t *testing.T) {
	up := wsUpstream(t)
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	c, err := net.Dial("tcp", e.l.ListenAddr())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET http://allowed.test:%s/ws HTTP/1.1\r\nHost: allowed.test:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	msg := strings.Repeat("frame", 1000)
	io.WriteString(c, msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
		t.Fatalf("echo: %v", err)
	}
	c.Close()
	d := e.rec.wait(t, "websocket", func(d Decision) bool { return d.Kind == KindWebSocket && d.Decision == Allow })
	if d.BytesUp < int64(len(msg)) || d.BytesDown < int64(len(msg)) {
		t.Fatalf("counted %d up %d down", d.BytesUp, d.BytesDown)
	}
	eventually(t, fmt.Sprintf("wire counts: decision %+v, upstream in %d out %d", d, up.bytesIn.Load(), up.bytesOut.Load()), func() bool { return d.BytesUp == up.bytesIn.Load() && d.BytesDown == up.bytesOut.Load() })
	// Upgrades to other protocols and to hosts not allowed are refused.
	for _, req := range []string{
		"GET http://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
		"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	} {
		c, _ := net.Dial("tcp", e.l.ListenAddr())
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode == 101 || resp.StatusCode == 200 {
			t.Fatalf("%q: %v %v", req, resp, err)
		}
	}
}

func TestEnvAndArgv(t *testing.T) {
	e := newEnv(t, Options{}, LeaseConfig{SocketDir: t.TempDir(), Inject: []Inject{{Name: "claude-code", Host: "api.inject.test", Header: "x-api-key", Key: "sk-real-secret", BaseURLEnv: "ANTHROPIC_BASE_URL", KeyEnv: "ANTHROPIC_API_KEY"}}})
	addr := e.l.ListenAddr()
	u := "http://" + addr
	want := []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u, "HTTP_PROXY=" + u, "http_proxy=" + u, "ALL_PROXY=" + u, "all_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1", "NODE_USE_ENV_PROXY=1",
		"ANTHROPIC_BASE_URL=" + u + "/_kusaw/inject/claude-code/" + e.l.injectToken, "ANTHROPIC_API_KEY=factory-egress-placeholder",
	}
	if got := strings.Join(e.l.Env(), "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("env:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	argv := e.l.BridgeArgv("/usr/bin/kusaw")
	if strings.Join(argv, " ") != "/usr/bin/kusaw __egress-bridge --lease "+e.l.SocketPath()+" --listen "+addr+" --" {
		t.Fatalf("argv %q", argv)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", e.l.c.Inject[0], e.l.c, e.l.c.Inject, e.l.c.Inject); strings.Contains(s, "sk-real-secret") {
		t.Fatalf("the key is printable: %s", s)
	}
}

func TestWebSocketInsideConnectToPlainPort(t *testing.T) {
	up := wsUpstream(t)
	port := portOf(t, up.Addr().String())
	ps := strconv.Itoa(port)
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+ps), AllowRanges: loopback8})
	e.p.plainTunnelPort = port
	e.dns.set("allowed.test", "127.0.0.1")
	c, br, resp := e.connect("allowed.test:"+ps, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: allowed.test:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", port)
	r, err := http.ReadResponse(br, nil)
	if err != nil || r.StatusCode != 101 {
		t.Fatalf("%v %v", r, err)
	}
	msg := strings.Repeat("ws", 5000)
	io.WriteString(c, msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
		t.Fatalf("echo: %v", err)
	}
	c.Close()
	d := e.rec.wait(t, "tunnel end", func(d Decision) bool { return d.Kind == KindConnect && d.Decision == Allow })
	eventually(t, fmt.Sprintf("wire counts: decision %+v, upstream in %d out %d", d, up.bytesIn.Load(), up.bytesOut.Load()), func() bool { return d.BytesUp == up.bytesIn.Load() && d.BytesDown == up.bytesOut.Load() })
}

// The step cannot choose the key the provider sees, nor send the real
// key anywhere but the configured upstream.
func TestInjectCannotBeRedirected(t *testing.T) {
	saw := make(chan string, 10)
	up := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw <- r.Host + " " + r.Header.Get("X-Api-Key")
	}))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{AllowRanges: loopback8, Inject: []Inject{{Name: "p", Header: "x-api-key", Key: "real", Upstream: "https://api.inject.test:" + port}}})
	e.dns.set("api.inject.test", "127.0.0.1")
	e.dns.set("evil.test", "127.0.0.1")
	req, _ := http.NewRequest("GET", e.l.InjectURL("p")+"/v1", nil)
	req.Host = "evil.test:" + port
	req.Header.Set("X-Api-Key", "attacker-key")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := <-saw; s != "api.inject.test:"+port+" real" {
		t.Fatalf("upstream saw %q", s)
	}
	// The inject path on another host is just a request to that host.
	resp, err = e.client().Get("http://evil.test:" + port + "/_kusaw/inject/p/v1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("inject path on another host: %s", resp.Status)
	}
}

// The guard runs again at connect(2): even a target that skipped the
// check (a bug upstream of dial) cannot reach a refused address.
func TestDialRechecksTheAddress(t *testing.T) {
	up := listenCounting(t, "127.0.0.1:0")
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	e := newEnv(t, Options{}, LeaseConfig{})
	tg := &target{kind: KindConnect, host: "allowed.test", port: portOf(t, up.Addr().String()),
		addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, start: time.Now()}
	_, ref := e.l.dial(t.Context(), tg)
	if ref == nil || ref.status != 502 || !strings.Contains(ref.line, "not to the address that was checked") {
		t.Fatalf("dial of an unchecked loopback address: %+v", ref)
	}
	if up.accepts.Load() != 0 {
		t.Fatal("the refused address was connected")
	}
	// Twin: with the range allowed the same dial connects.
	e2 := newEnv(t, Options{}, LeaseConfig{AllowRanges: loopback8})
	mc, ref := e2.l.dial(t.Context(), tg)
	if ref != nil {
		t.Fatal(ref)
	}
	mc.Close()
	eventually(t, "accept", func() bool { return up.accepts.Load() == 1 })
}

// The other direction: the upstream says all it has and half-closes; the
// client reads to the end and then still sends, and the upstream gets it.
// A tunnel that closed both ways at the upstream's FIN would lose it.
func TestUpstreamHalfCloseReachesClient(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	errs := make(chan error, 1)
	go func() {
		raw, err := up.Accept()
		if err != nil {
			errs <- err
			return
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{getCA(t).cert}})
		if _, err := tc.Write([]byte("all I have")); err != nil {
			errs <- err
			return
		}
		if err := tc.CloseWrite(); err != nil { // close_notify
			errs <- err
			return
		}
		if err := raw.(*net.TCPConn).CloseWrite(); err != nil { // the FIN
			errs <- err
			return
		}
		got, err := io.ReadAll(tc)
		if err != nil && len(got) == 0 {
			errs <- fmt.Errorf("upstream read after its half-close: %v", err)
			return
		}
		if string(got) != "late reply" {
			errs <- fmt.Errorf("upstream got %q after its half-close", got)
			return
		}
		errs <- nil
	}()
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	c, br, resp := e.connect("allowed.test:"+port, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "allowed.test", RootCAs: getCA(t).pool})
	if got := readBody(t, tc); got != "all I have" {
		t.Fatalf("client read %q", got)
	}
	if _, err := tc.Write([]byte("late reply")); err != nil {
		t.Fatalf("client write after the upstream's half-close: %v", err)
	}
	tc.CloseWrite()
	c.(*net.TCPConn).CloseWrite()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}
