package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawUpstream accepts connections; each reads to EOF, then writes back
// the number of bytes the reply function asks for, then closes.
func rawUpstream(t testing.TB, reply func(got int64) int64) (*countingListener, chan int64) {
	t.Helper()
	cl := listenCounting(t, "127.0.0.1:0")
	got := make(chan int64, 1000)
	go func() {
		for {
			c, err := cl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				n, _ := io.Copy(io.Discard, c)
				got <- n
				if m := reply(n); m > 0 {
					io.CopyN(c, zeros{}, m)
				}
			}()
		}
	}()
	return cl, got
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// sendTunnel opens a tunnel, sends a real ClientHello for host and then
// n raw bytes, half-closes, and returns what came back.
func (e *env) sendTunnel(target, host string, n int64) (int64, error) {
	c, br, resp := e.connect(target, nil)
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	hello := captureHello(e.t, host)
	if _, err := c.Write(hello); err != nil {
		return 0, err
	}
	if _, err := io.CopyN(c, zeros{}, n); err != nil {
		return 0, err
	}
	c.(*net.TCPConn).CloseWrite()
	return io.Copy(io.Discard, br)
}

func TestExactBytesThroughConnect(t *testing.T) {
	up, got := rawUpstream(t, func(n int64) int64 { return n * 3 })
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	helloLen := int64(len(captureHello(t, "allowed.test")))
	sizes := []int64{0, 1, 2, 1000, 4095, 4096, 65535, 65536, 65537, 1<<20 + 3}
	for i := 0; i < 60; i++ {
		n := sizes[i%len(sizes)] + int64(i/len(sizes))
		back, err := e.sendTunnel("allowed.test:"+port, "allowed.test", n)
		if err != nil {
			t.Fatal(err)
		}
		if g := <-got; g != helloLen+n {
			t.Fatalf("round %d: upstream got %d bytes, want %d", i, g, helloLen+n)
		}
		if back != (helloLen+n)*3 {
			t.Fatalf("round %d: client got %d bytes back, want %d", i, back, (helloLen+n)*3)
		}
		d := e.rec.wait(t, "tunnel end", func(d Decision) bool { return d.Decision == Allow && d.BytesUp == helloLen+n })
		if d.BytesDown != (helloLen+n)*3 {
			t.Fatalf("round %d: decision %+v", i, d)
		}
		e.rec.mu.Lock()
		e.rec.ds = nil
		e.rec.mu.Unlock()
	}
	s := e.l.Close()
	eventually(t, "wire totals", func() bool { return s.BytesUp == up.bytesIn.Load() && s.BytesDown == up.bytesOut.Load() })
}

func TestExactBytesThroughPlainHTTP(t *testing.T) {
	up := plainUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		m, _ := strconv.ParseInt(r.URL.Query().Get("m"), 10, 64)
		w.Header().Set("X-Got", strconv.FormatInt(n, 10))
		w.Header().Set("Content-Length", strconv.FormatInt(m, 10))
		io.CopyN(w, zeros{}, m)
	}))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	sizes := []int64{0, 1, 4096, 65537, 1<<20 + 7}
	for i := 0; i < 40; i++ {
		n, m := sizes[i%len(sizes)]+int64(i), sizes[(i+2)%len(sizes)]+int64(i)
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://allowed.test:%s/?m=%d", port, m), io.LimitReader(zeros{}, n))
		req.ContentLength = n
		resp, err := e.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-Got") != strconv.FormatInt(n, 10) || body != m {
			t.Fatalf("round %d: upstream got %s of %d, client got %d of %d", i, resp.Header.Get("X-Got"), n, body, m)
		}
	}
	s := e.l.Close()
	if s.Hosts[0].Connections != 40 {
		t.Fatalf("summary %+v", s)
	}
	eventually(t, "wire totals", func() bool { return s.BytesUp == up.bytesIn.Load() && s.BytesDown == up.bytesOut.Load() })
}

func TestPerHostBudget(t *testing.T) {
	up, got := rawUpstream(t, func(int64) int64 { return 10 })
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	helloLen := int64(len(captureHello(t, "allowed.test")))
	budget := 2*helloLen + 5000
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port, "other.test:"+port), AllowRanges: loopback8,
		Budgets: Budgets{PerHost: budget}, BudgetKey: "steps.test.sandbox.egress.budgets"})
	e.dns.set("allowed.test", "127.0.0.1")
	e.dns.set("other.test", "127.0.0.1")

	// Twin: exactly up to the budget passes, whole, with its answer.
	if back, err := e.sendTunnel("allowed.test:"+port, "allowed.test", 5000); err != nil || back != 10 {
		t.Fatalf("under budget: %d %v", back, err)
	}
	if g := <-got; g != helloLen+5000 {
		t.Fatalf("upstream got %d", g)
	}
	// Attack: one byte more than what is left closes the tunnel; the
	// upstream never gets more than the budget.
	back, _ := e.sendTunnel("allowed.test:"+port, "allowed.test", 1)
	if back != 0 {
		t.Fatalf("a tunnel over budget got an answer (%d bytes)", back)
	}
	if g := <-got; g != helloLen {
		t.Fatalf("upstream got %d bytes of the crossing tunnel, want %d (the budget)", g, helloLen)
	}
	d := e.rec.wait(t, "budget close", func(d Decision) bool { return d.Decision == Close && d.Reason == ReasonBudgetHost })
	if !strings.Contains(d.Detail, "raise steps.test.sandbox.egress.budgets.per_host") || !d.Blocked() {
		t.Fatalf("%+v", d)
	}
	// New connections to that host are refused before dialing ...
	accepts := up.accepts.Load()
	_, _, resp := e.connect("allowed.test:"+port, nil)
	if resp.StatusCode != 403 || !strings.Contains(resp.Status, "egress budget for allowed.test") {
		t.Fatalf("%q", resp.Status)
	}
	rq, _ := e.client().Get("http://allowed.test:" + port + "/")
	if rq == nil || rq.StatusCode != 403 {
		t.Fatalf("plain request after the budget: %v", rq)
	}
	if up.accepts.Load() != accepts {
		t.Fatal("a connection over budget was dialed")
	}
	// ... while another host has its own budget.
	if back, err := e.sendTunnel("other.test:"+port, "other.test", 100); err != nil || back != 10 {
		t.Fatalf("other host: %d %v", back, err)
	}
	<-got
	s := e.l.Close()
	for _, h := range s.Hosts {
		if h.Host == "allowed.test" && (h.BytesUp != budget || h.Refusals != 3) {
			t.Fatalf("summary %+v", h)
		}
	}
}

func TestTotalBudgetAcrossConcurrentTunnels(t *testing.T) {
	up, got := rawUpstream(t, func(int64) int64 { return 0 })
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	const total = 300000
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "*.allowed.test:"+port), AllowRanges: loopback8, Budgets: Budgets{Total: total}})
	for i := 0; i < 8; i++ {
		e.dns.set(fmt.Sprintf("h%d.allowed.test", i), "127.0.0.1")
	}
	var wg sync.WaitGroup
	var opened atomic.Int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A tunnel that starts after the total is used up is refused
			// at CONNECT and never reaches the upstream.
			_, err := e.sendTunnel(fmt.Sprintf("h%d.allowed.test:%s", i, port), fmt.Sprintf("h%d.allowed.test", i), 100000)
			if err == nil || !strings.HasPrefix(err.Error(), "CONNECT") {
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	var sum int64
	for i := int64(0); i < opened.Load(); i++ {
		sum += <-got
	}
	if sum > total {
		t.Fatalf("upstreams got %d bytes, over the total budget %d", sum, total)
	}
	if sum < total-8*70000 {
		t.Fatalf("upstreams got only %d of %d", sum, total)
	}
	_, _, resp := e.connect("h0.allowed.test:"+port, nil)
	if resp.StatusCode != 403 || !strings.Contains(resp.Status, "budget of this attempt") {
		t.Fatalf("%q", resp.Status)
	}
	s := e.l.Close()
	if s.BytesUp != sum {
		t.Fatalf("summary says %d bytes up, upstreams got %d", s.BytesUp, sum)
	}
}

func TestInject(t *testing.T) {
	release := make(chan struct{})
	type seen struct{ path, query, key, auth, host string }
	saw := make(chan seen, 10)
	up := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"), r.Host}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: two\n\n")
	}))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	const key = "sk-real-secret-0123456789"
	e := newEnv(t, Options{}, LeaseConfig{AllowRanges: loopback8, Inject: []Inject{{
		Name: "claude-code", Header: "x-api-key", Key: key, Upstream: "https://api.inject.test:" + port + "/gw",
		BaseURLEnv: "ANTHROPIC_BASE_URL", KeyEnv: "ANTHROPIC_API_KEY",
	}}})
	e.dns.set("api.inject.test", "127.0.0.1")

	// The step calls its base URL directly (NO_PROXY covers 127.0.0.1),
	// with the placeholder key, as a provider SDK would.
	req, _ := http.NewRequest("POST", e.l.InjectURL("claude-code")+"/v1/messages?beta=true", strings.NewReader(`{"stream":true}`))
	req.Header.Set("X-Api-Key", Placeholder)
	req.Header.Set("Authorization", "Bearer "+Placeholder)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := <-saw
	if s.path != "/gw/v1/messages" || s.query != "beta=true" || s.key != key || s.auth != "" || s.host != "api.inject.test:"+port {
		t.Fatalf("upstream saw %+v", s)
	}
	// Server-sent events stream: the first event arrives while the
	// upstream still holds the response open.
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event %q %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if !strings.Contains(string(rest), "data: two") {
		t.Fatalf("rest %q", rest)
	}
	// A client that ignores NO_PROXY sends the same URL through the proxy.
	req2, _ := http.NewRequest("GET", e.l.InjectURL("claude-code")+"/v1/models", nil)
	resp2, err := e.client().Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	if s := <-saw; s.key != key || s.path != "/gw/v1/models" {
		t.Fatalf("via proxy upstream saw %+v", s)
	}
	for _, kv := range e.l.Env() {
		if strings.Contains(kv, key) {
			t.Fatalf("the key is in the step's environment: %s", kv)
		}
	}
	sum := e.l.Close()
	all := fmt.Sprintf("%+v %+v", e.rec.all(), sum)
	if strings.Contains(all, key) {
		t.Fatal("the key is in a decision or the summary")
	}
	if !strings.Contains(all, "Kind:inject") || !strings.Contains(all, "Host:api.inject.test") {
		t.Fatalf("no inject decision: %s", all)
	}
}

func TestInjectGuardAndBadConfig(t *testing.T) {
	// Without allow_ranges the inject upstream's loopback answer is refused.
	e := newEnv(t, Options{}, LeaseConfig{Inject: []Inject{{Name: "p", Header: "x-api-key", Key: "k", Host: "api.inject.test"}}})
	e.dns.set("api.inject.test", "127.0.0.1")
	resp, err := http.Get(e.l.InjectURL("p") + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(body, "resolves to 127.0.0.1, a loopback address") {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if resp, _ := http.Get("http://" + e.l.ListenAddr() + "/_kusaw/inject/nope/v1"); resp == nil || resp.StatusCode != 404 {
		t.Fatal("unknown inject name not refused")
	}
	// Attack: another local process that knows the layout but not the
	// lease's token cannot use the key.
	for _, path := range []string{"/_kusaw/inject/p/v1", "/_kusaw/inject/p/" + e.l.injectToken + "x/v1", "/_kusaw/inject/p"} {
		resp, _ := http.Get("http://" + e.l.ListenAddr() + path)
		if resp == nil || resp.StatusCode != 403 || !strings.Contains(resp.Status, "lacks this lease's token") {
			t.Fatalf("%s: %v", path, resp)
		}
		resp.Body.Close()
	}
	if len(e.l.injectToken) != 32 {
		t.Fatalf("token %q", e.l.injectToken)
	}
	p, _ := NewProxy(Options{})
	for _, in := range []Inject{
		{Name: "p", Header: "x-api-key", Key: "", Host: "api.example.com"},
		{Name: "P Q", Header: "x-api-key", Key: "k", Host: "api.example.com"},
		{Name: "p", Header: "", Key: "k", Host: "api.example.com"},
		{Name: "p", Header: "x-api-key", Key: "k", Upstream: "http://api.example.com"},
		{Name: "p", Header: "x-api-key", Key: "k", Upstream: "https://10.0.0.1"},
		{Name: "p", Header: "x-api-key", Key: "k\r\nX: y", Host: "api.example.com"},
	} {
		if _, err := p.Lease(LeaseConfig{ID: "x", Listen: "127.0.0.1:0", Inject: []Inject{in}}); err == nil {
			t.Errorf("lease with %+v accepted", in)
		} else if strings.Contains(err.Error(), "k\r\n") {
			t.Errorf("error shows the key: %v", err)
		}
	}
}

func TestLeaseCloseEndsOpenTunnels(t *testing.T) {
	up := listenCounting(t, "127.0.0.1:0")
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	c, br, resp := e.connect("allowed.test:"+port, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	c.Write(captureHello(t, "allowed.test"))
	c.Write(bytes.Repeat([]byte("x"), 1000))
	eventually(t, "bytes upstream", func() bool { return up.bytesIn.Load() > 1000 })
	s := e.l.Close()
	if s.Decisions != 1 || s.Hosts[0].Connections != 1 || s.BytesUp != up.bytesIn.Load() {
		t.Fatalf("summary %+v", s)
	}
	d := e.rec.wait(t, "lease closed", func(d Decision) bool { return d.Reason == ReasonLeaseClosed })
	if d.Decision != Allow {
		t.Fatalf("%+v", d)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the tunnel is still open after Close")
	}
	if _, err := net.Dial("tcp", e.l.ListenAddr()); err == nil {
		t.Fatal("the lease still listens after Close")
	}
	if s2 := e.l.Close(); s2.Decisions != s.Decisions {
		t.Fatal("a second Close changed the summary")
	}
}

// The attack: a step asks the inject endpoint for a path outside base_url's
// prefix, plainly or encoded, hoping the upstream (or a gateway in front of
// it that normalises paths) serves another endpoint with the real key. A
// recording upstream on loopback sees every request that reaches it.
func TestInjectKeyStaysUnderBasePath(t *testing.T) {
	type seen struct{ raw, key string }
	saw := make(chan seen, 64)
	up := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw <- seen{r.RequestURI, r.Header.Get("X-Api-Key")}
		io.WriteString(w, "ok")
	}))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	const key = "sk-real-secret-path"
	e := newEnv(t, Options{}, LeaseConfig{AllowRanges: loopback8, Inject: []Inject{{
		Name: "p", Header: "x-api-key", Key: key, Upstream: "https://api.inject.test:" + port + "/gw/v1",
	}}})
	e.dns.set("api.inject.test", "127.0.0.1")
	base := e.l.InjectURL("p")
	u, _ := url.Parse(base)
	send := func(rest string) (int, string) {
		t.Helper()
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.Path, rest, u.Host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, rest := range []string{
		"/../admin", "/../../admin", "/%2e%2e/admin", "/%2E%2E/admin", "/.%2e/admin", "/..%2fadmin", "/..%2Fadmin",
		"/x/..%2f..%2fadmin", "/x/%2e%2e%2f%2e%2e%2fadmin", "/./messages", "/..%5cadmin", "/x%00/y", "//admin", "/messages/%2e%2e",
	} {
		st, body := send(rest)
		if st != 403 || !strings.Contains(body, ReasonInjectPath) || !strings.Contains(body, "so the key stays under https://api.inject.test:"+port+"/gw/v1") {
			t.Errorf("%s: %d %q, want 403 naming the rule", rest, st, body)
		}
	}
	// The twin: clean paths, with escapes that are not separators, go
	// through below the prefix.
	for rest, want := range map[string]string{
		"/messages":            "/gw/v1/messages",
		"/messages/":           "/gw/v1/messages/",
		"/models/a%20b":        "/gw/v1/models/a%20b",
		"/files/x..y?q=%2e%2e": "/gw/v1/files/x..y?q=%2e%2e",
		"":                     "/gw/v1",
	} {
		if st, _ := send(rest); st != 200 {
			t.Errorf("%q: %d, want 200", rest, st)
			continue
		}
		if s := <-saw; s.raw != want || s.key != key {
			t.Errorf("%q: upstream saw %+v, want %s with the key", rest, s, want)
		}
	}
	close(saw)
	for s := range saw {
		t.Errorf("a refused request reached the upstream: %+v", s)
	}
	decisions := fmt.Sprintf("%+v", e.rec.all())
	if !strings.Contains(decisions, "Reason:"+ReasonInjectPath) || strings.Contains(decisions, key) {
		t.Errorf("decisions: %s", decisions)
	}
}

// A request with both Content-Length and Transfer-Encoding is refused
// before anything is forwarded (an upstream that picks the other header
// would see a second, smuggled request); either header alone goes through.
func TestAmbiguousFramingRefused(t *testing.T) {
	saw := make(chan string, 8)
	up := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		saw <- r.URL.Path + ":" + string(b)
		io.WriteString(w, "ok")
	}))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{AllowRanges: loopback8, Inject: []Inject{{
		Name: "p", Header: "x-api-key", Key: "k", Upstream: "https://api.inject.test:" + port,
	}}})
	e.dns.set("api.inject.test", "127.0.0.1")
	u, _ := url.Parse(e.l.InjectURL("p"))
	send := func(headers, body string) int {
		t.Helper()
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST %s/v1 HTTP/1.1\r\nHost: %s\r\n%s\r\n%s", u.Path, u.Host, headers, body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	smuggle := "0\r\n\r\nPOST /v1/admin HTTP/1.1\r\nHost: x\r\n\r\n"
	if st := send(fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(smuggle)), smuggle); st != 400 {
		t.Fatalf("both headers: %d, want 400", st)
	}
	if st := send("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"); st != 200 {
		t.Fatalf("chunked alone: %d", st)
	}
	if got := <-saw; got != "/v1:abc" {
		t.Fatalf("upstream saw %q first: the refused request reached it", got)
	}
	if st := send("Content-Length: 2\r\n", "hi"); st != 200 || <-saw != "/v1:hi" {
		t.Fatalf("Content-Length alone: %d", st)
	}
	if !strings.Contains(fmt.Sprintf("%+v", e.rec.all()), "both Content-Length and Transfer-Encoding") {
		t.Fatal("the refusal is not in the decisions")
	}
}
