package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kusaw/kusaw/config"
)

// corpProxy is a CONNECT proxy on 127.0.0.1 (over TLS when tlsOn) that
// records request lines and Proxy-Authorization and connects every target
// to 127.0.0.1 on the same port.
type corpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	lines []string
	auths []string
}

func startCorpProxy(t *testing.T, tlsOn bool) *corpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsOn {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{getCA(t).cert}})
	}
	p := &corpProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *corpProxy) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.lines = append(p.lines, req.Method+" "+req.RequestURI)
	p.auths = append(p.auths, req.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	_, port, _ := net.SplitHostPort(req.RequestURI)
	up, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprint(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	fmt.Fprint(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
	io.Copy(c, up)
}

func (p *corpProxy) seen() ([]string, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...), append([]string(nil), p.auths...)
}

// The upstream proxy over https:// and http://: allowed hosts go through it
// with CONNECT and the credentials (TLS and plain HTTP alike) without kusaw
// resolving them; upstream_no_proxy hosts are dialled directly; refused
// hosts never reach it; the credentials appear in no decision.
func TestUpstreamProxy(t *testing.T) {
	for _, tlsOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			tlsUp := tlsUpstream(t, http.HandlerFunc(hello))
			plainUp := plainUpstream(t, http.HandlerFunc(hello))
			tp, pp := strconv.Itoa(portOf(t, tlsUp.Addr().String())), strconv.Itoa(portOf(t, plainUp.Addr().String()))
			corp := startCorpProxy(t, tlsOn)
			scheme, cport := "http", strconv.Itoa(portOf(t, corp.ln.Addr().String()))
			if tlsOn {
				scheme = "https"
			}
			np, _ := config.ParseHostPattern("rebind.test")
			up := &Upstream{URL: scheme + "://other.test:" + cport, Auth: "builder:pw-4711", NoProxy: []config.HostPattern{np}}
			e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+tp, "allowed.test:"+pp, "rebind.test:"+tp), AllowRanges: loopback8, Upstream: up})
			e.dns.set("other.test", "127.0.0.1") // the proxy's own name
			e.dns.set("rebind.test", "127.0.0.1")
			for _, u := range []string{"https://allowed.test:" + tp + "/", "http://allowed.test:" + pp + "/", "https://rebind.test:" + tp + "/"} {
				resp, err := e.client().Get(u)
				if err != nil {
					t.Fatalf("%s: %v", u, err)
				}
				body := readBody(t, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(body, "hello") {
					t.Fatalf("%s: %s %q", u, resp.Status, body)
				}
			}
			resp, err := e.client().Get("https://denied.test/")
			if err == nil {
				resp.Body.Close()
			}
			lines, auths := corp.seen()
			if len(lines) != 2 || lines[0] != "CONNECT allowed.test:"+tp || lines[1] != "CONNECT allowed.test:"+pp {
				t.Fatalf("the upstream saw %q; want the two allowed.test CONNECTs only", lines)
			}
			for _, a := range auths {
				if a != "Basic YnVpbGRlcjpwdy00NzEx" {
					t.Fatalf("Proxy-Authorization %q", a)
				}
			}
			if e.dns.count("allowed.test") != 0 || e.dns.count("rebind.test") == 0 {
				t.Fatalf("kusaw resolved allowed.test %d times (the upstream's job), rebind.test %d (its own)", e.dns.count("allowed.test"), e.dns.count("rebind.test"))
			}
			e.l.Close()
			for _, d := range e.rec.all() {
				if strings.Contains(fmt.Sprintf("%+v", d), "pw-4711") || strings.Contains(fmt.Sprintf("%+v", d), "YnVpbGRlcjpwdy00NzEx") {
					t.Fatalf("a decision carries the credentials: %+v", d)
				}
			}
			if s := fmt.Sprintf("%v %+v %#v", up, up, up); strings.Contains(s, "pw-4711") {
				t.Fatalf("the upstream prints its credentials: %s", s)
			}
		})
	}
}

// Audit mode behind an upstream proxy: a host no entry lists is admitted
// to learn it, but the address guard still holds. A name the step controls
// that points at a metadata or private address must be refused before the
// upstream (which resolves names itself) is ever asked; a name that leads
// to an admitted range goes through, to the address kusaw checked.
func TestUpstreamAuditGuard(t *testing.T) {
	plainUp := plainUpstream(t, http.HandlerFunc(hello))
	pp := strconv.Itoa(portOf(t, plainUp.Addr().String()))
	corp := startCorpProxy(t, false)
	up := &Upstream{URL: "http://other.test:" + strconv.Itoa(portOf(t, corp.ln.Addr().String())), Auth: "builder:pw-4711"}
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "listed.test"), AllowRanges: loopback8, Upstream: up, Audit: true})
	e.dns.set("other.test", "127.0.0.1")
	e.dns.set("meta.evil.test", "169.254.169.254")
	e.dns.set("inner.evil.test", "10.1.2.3")
	e.dns.set("learn.test", "127.0.0.1")
	for _, h := range []string{"meta.evil.test", "inner.evil.test", "nowhere.evil.test"} {
		resp, err := e.client().Get("http://" + h + ":" + pp + "/")
		if err == nil {
			body := readBody(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Errorf("%s: audit mode sent it through the upstream: %s %q", h, resp.Status, body)
			}
		}
	}
	if lines, _ := corp.seen(); len(lines) != 0 {
		t.Fatalf("the upstream was asked for %q; a guarded address must be refused before it", lines)
	}
	// The twin: a host to learn, in an admitted range, goes through.
	resp, err := e.client().Get("http://learn.test:" + pp + "/")
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body, "hello") {
		t.Fatalf("learn.test: %s %q", resp.Status, body)
	}
	if lines, _ := corp.seen(); len(lines) != 1 || lines[0] != "CONNECT 127.0.0.1:"+pp {
		t.Fatalf("the upstream saw %q; want the checked address", lines)
	}
	e.l.Close()
	var would bool
	for _, d := range e.rec.all() {
		if d.Host == "learn.test" && d.Decision == WouldRefuse {
			would = true
		}
	}
	if !would {
		t.Errorf("learn.test is not logged would_refuse: %+v", e.rec.all())
	}
}
