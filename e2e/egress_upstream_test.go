package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// recordingProxy is a small CONNECT proxy on 127.0.0.1 standing in for a
// corporate proxy. It records every request line and Proxy-Authorization,
// and connects every target to 127.0.0.1 (the test network is loopback
// only), resolving nothing. answer, when set, is sent instead of 200.
type recordingProxy struct {
	ln     net.Listener
	answer string
	mu     sync.Mutex
	seen   []string
	auths  []string
}

func newRecordingProxy(t *testing.T, answer string) *recordingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{ln: ln, answer: answer}
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

func (p *recordingProxy) addr() string { return p.ln.Addr().String() }

func (p *recordingProxy) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.seen = append(p.seen, req.Method+" "+req.RequestURI)
	p.auths = append(p.auths, req.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	if p.answer != "" {
		fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n", p.answer)
		return
	}
	if req.Method != http.MethodConnect {
		fmt.Fprint(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
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

func (p *recordingProxy) record() ([]string, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...), append([]string(nil), p.auths...)
}

// upstream_proxy: an allowed host is reached through the corporate proxy
// (it records the CONNECT and the credentials; the name is resolved by
// the upstream, not kusaw), a refused host never reaches it, and a proxy
// that asks for credentials or is down gives a 502 naming upstream_proxy.
func TestEgressUpstreamProxy(t *testing.T) {
	needSandbox(t)
	fx := newEgressFixture(t)
	corp := newRecordingProxy(t, "")
	const cred = "builder:s3cret-proxy-pass"
	factory := func(proxyAddr string) string {
		dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
sandbox:
  mode: required
  network: allowlist
  allow_read: [`+fx.tools+`]
  egress:
    resolver: "`+fx.dns.addr+`"
    allow: ["other.test:`+fx.tlsUp.port+`", "svc.test:`+fx.plainUp.port+`"]
    upstream_proxy: {url: "http://`+proxyAddr+`", credentials: {secret: corp.proxy}}
    upstream_no_proxy: [svc.test]
    allow_ranges: [127.0.0.0/8]
pipelines:
  default: [x]
steps:
  x:
    run: ["true"]
`, "app")
		set := exec.Command(kusawBin, "config", "set", "corp.proxy", "--secret")
		set.Dir = dir
		set.Env = testEnv(t, dir)
		set.Stdin = strings.NewReader(cred + "\n")
		if out, err := set.CombinedOutput(); err != nil {
			t.Fatalf("kusaw config set --secret: %v\n%s", err, out)
		}
		return dir
	}
	dir := factory(corp.addr())
	// other.test is in no DNS: only the upstream can reach it. svc.test is
	// in upstream_no_proxy: kusaw resolves and dials it itself.
	fx.dns.set("svc.test", "127.0.0.1")
	r := execIn(t, dir, "x", fmt.Sprintf(`curl -sS --cacert %[1]s https://other.test:%[2]s/via-corp; echo
curl -sS http://svc.test:%[3]s/no-proxy; echo
curl -sS https://denied.test/x; echo`, fx.caPEM, fx.tlsUp.port, fx.plainUp.port))
	if !strings.Contains(r.stdout, "hello over tls /via-corp") || !strings.Contains(r.stdout, "hello over http /no-proxy") || !strings.Contains(r.stderr+r.stdout, "403") {
		t.Fatalf("output:\n%s%s", r.stdout, r.stderr)
	}
	seen, auths := corp.record()
	if len(seen) != 1 || seen[0] != "CONNECT other.test:"+fx.tlsUp.port || auths[0] != "Basic YnVpbGRlcjpzM2NyZXQtcHJveHktcGFzcw==" {
		t.Fatalf("the corporate proxy saw %q with %q; want only the CONNECT to other.test with the credentials", seen, auths)
	}
	if fx.dns.count("other.test") != 0 {
		t.Error("kusaw resolved a host the upstream proxy carries")
	}
	if !r.logged(t, "allow", "other.test", atoi(fx.tlsUp.port), "") || !r.logged(t, "refuse", "denied.test", 443, "host.not_allowed") {
		t.Errorf("egress.log: %v", r.egressLines(t))
	}
	if hits := grepDir(t, dir+"/.kusaw", "s3cret-proxy-pass"); len(hits) > 0 {
		t.Errorf("the proxy password is in the records: %v", hits)
	}
	r.verify(t, dir)
	if c := runKusaw(t, dir, "egress", "check", "other.test:"+fx.tlsUp.port); c.code != 0 || !strings.Contains(c.stdout, "through upstream_proxy http://"+corp.addr()) {
		t.Errorf("egress check: %d\n%s%s", c.code, c.stdout, c.stderr)
	}

	// A proxy that wants other credentials, and one that is down.
	deny := newRecordingProxy(t, "407 Proxy Authentication Required")
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downAddr := down.Addr().String()
	down.Close()
	for _, c := range []struct{ addr, want string }{
		{deny.addr(), "kusaw: upstream_proxy http://" + deny.addr() + ": answered 407 Proxy Authentication Required to CONNECT other.test:" + fx.tlsUp.port},
		{downAddr, "kusaw: upstream_proxy http://" + downAddr + ": unreachable: connection refused"},
	} {
		d := factory(c.addr)
		r := execIn(t, d, "x", fmt.Sprintf(`curl -sS --cacert %s https://other.test:%s/never 2>&1`, fx.caPEM, fx.tlsUp.port))
		if !strings.Contains(r.stdout, "502") {
			t.Errorf("upstream %s: want a 502:\n%s%s", c.addr, r.stdout, r.stderr)
		}
		found := false
		for _, m := range r.egressLines(t) {
			if m["decision"] == "fail" && m["reason"] == "upstream_proxy.failed" && strings.HasPrefix(fmt.Sprint(m["detail"]), c.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("egress.log lacks %q: %v", c.want, r.egressLines(t))
		}
	}
	if fx.tlsUp.saw("/never") {
		t.Error("a fetch through a failing upstream proxy arrived")
	}
}
