//go:build linux

package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
)

// The attack of issue 17: connections to serve's TCP port that send one
// request (answered 401, no token needed) or nothing, then stay open. A
// bounded flood (2,000 connections, all on loopback): the owner's Unix
// socket answers within a second throughout, and the idle connections are
// closed (at once beyond the cap, else after the idle timeout, shortened
// here so the test is quick; TestDefaultLimits checks the defaults).
func TestServeFloodOfIdleConnections(t *testing.T) {
	f := serveFactory(t, "pipelines:\n  default: [a]\nsteps:\n  a:\n    run: [\"true\"]\n")
	// The test holds both ends of up to 1,000 accepted connections and the
	// client end of the rest: about 3,000 descriptors.
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 3500 {
		t.Fatalf("the flood needs 3,500 file descriptors; this process may open %d (raise ulimit -n)", rl.Cur)
	}
	lim := Limits{Idle: 2 * time.Second, ReadHeader: 3 * time.Second, MaxConns: 1000, MaxConnsPerAddr: 2000}
	s, _, _ := startServer(t, f, ServeOptions{MaxParallel: 1, Listen: "127.0.0.1:0", Token: "tok-0123456789", Limits: lim})
	addr := s.ServeAddr()
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)

	// The owner's API, polled over the Unix socket all through the flood.
	stop := make(chan struct{})
	var worst time.Duration
	var probeErr error
	probes := 0
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			start := time.Now()
			resp, err := hc.Get("http://x/v1/health")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil && probeErr == nil {
				probeErr = err
			}
			probes++
			worst = max(worst, time.Since(start))
		}
	}()

	const n = 2000
	floodStart := time.Now()
	closedAfter := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if i%2 == 0 {
			// One request without the token, then idle.
			fmt.Fprintf(c, "GET /v1/runs HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		}
		wg.Add(1)
		go func(i int, c net.Conn) {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(90 * time.Second))
			io.Copy(io.Discard, c) // until serve closes it
			closedAfter[i] = time.Since(floodStart)
		}(i, c)
	}
	wg.Wait()
	close(stop)
	pw.Wait()
	within := 0
	for _, d := range closedAfter {
		if d <= 75*time.Second {
			within++
		}
	}
	if within*100 < n*95 {
		t.Errorf("%d of %d idle connections closed within 75s, want at least 95%%", within, n)
	}
	if probeErr != nil || probes < 5 || worst > time.Second {
		t.Errorf("the Unix-socket API during the flood: %d probes, worst %s, error %v; want answers within 1s", probes, worst, probeErr)
	}
	for end := time.Now().Add(5 * time.Second); s.tcp.Open() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Errorf("%d TCP connections still counted open", s.tcp.Open())
			break
		}
	}
	// The twin: a client with the token is served once the flood is gone.
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/health", nil)
	req.Header.Set("Authorization", "Bearer tok-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the flood: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Connections beyond the per-address cap are answered 503 and closed at
// once; a slot freed is usable again. Oversized headers get 431.
func TestServeConnectionCaps(t *testing.T) {
	f := serveFactory(t, "pipelines:\n  default: [a]\nsteps:\n  a:\n    run: [\"true\"]\n")
	s, _, _ := startServer(t, f, ServeOptions{MaxParallel: 1, Listen: "127.0.0.1:0", Token: "tok-0123456789", Limits: Limits{MaxConnsPerAddr: 4, MaxHeaderBytes: 4 << 10}})
	addr := s.ServeAddr()
	var held []net.Conn
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitOpen := func(want int) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); s.tcp.Open() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("open connections %d, want %d", s.tcp.Open(), want)
			}
		}
	}
	waitOpen(4)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(b), "HTTP/1.1 503") || !strings.Contains(string(b), "limit per client") {
		t.Fatalf("fifth connection from one address: %q", b)
	}
	held[0].Close()
	waitOpen(3)
	// The twin: the freed slot serves a request with the token; an
	// oversized request is answered 431 and closed.
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-0123456789\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request in a freed slot: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 64<<10))
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 431 {
		t.Fatalf("oversized headers: %v %v", resp, err)
	}
	for _, h := range held[1:] {
		h.Close()
	}
}

// The defaults close an idle or silent connection well within 75 s, and
// zero fields take them.
func TestDefaultLimits(t *testing.T) {
	d := DefaultLimits()
	if d.Idle <= 0 || d.Idle > 60*time.Second || d.ReadHeader <= 0 || d.ReadHeader > 10*time.Second || d.Read <= 0 || d.Write <= 0 {
		t.Fatalf("timeouts %+v: an idle connection must be closed within 75s", d)
	}
	if d.MaxConns <= 0 || d.MaxConnsPerAddr <= 0 || d.MaxConnsPerAddr > d.MaxConns || d.MaxUnixConns <= 0 || d.MaxConns+d.MaxUnixConns > 1024 {
		t.Fatalf("caps %+v: must stay far below the usual 1024 file descriptors", d)
	}
	l := Limits{Idle: time.Second}.withDefaults()
	if l.Idle != time.Second || l.ReadHeader != d.ReadHeader || l.MaxConns != d.MaxConns {
		t.Fatalf("withDefaults: %+v", l)
	}
	hs := d.httpServer(http.NotFoundHandler())
	if hs.IdleTimeout != d.Idle || hs.ReadHeaderTimeout != d.ReadHeader || hs.ReadTimeout != d.Read || hs.WriteTimeout != d.Write || hs.MaxHeaderBytes != d.MaxHeaderBytes {
		t.Fatalf("server %+v", hs)
	}
}

// serve has no tunnels: a CONNECT is refused and its connection closed
// (the framing check does not follow a connection past a CONNECT).
func TestServeRefusesConnect(t *testing.T) {
	f := serveFactory(t, "pipelines:\n  default: [a]\nsteps:\n  a:\n    run: [\"true\"]\n")
	s, _, _ := startServer(t, f, ServeOptions{MaxParallel: 1, Listen: "127.0.0.1:0", Token: "tok-0123456789"})
	c, err := net.Dial("tcp", s.ServeAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\nAuthorization: Bearer tok-0123456789\r\n\r\nGET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-0123456789\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 405") || strings.Count(string(b), "HTTP/1.1 ") != 1 {
		t.Fatalf("CONNECT: %v %q (want one 405 and the close)", err, b)
	}
}

// The API refuses a request with both Content-Length and Transfer-Encoding
// on either listener; a plain request on the same listener is served.
func TestServeRefusesAmbiguousFraming(t *testing.T) {
	f := serveFactory(t, "pipelines:\n  default: [a]\nsteps:\n  a:\n    run: [\"true\"]\n")
	s, _, _ := startServer(t, f, ServeOptions{MaxParallel: 1, Listen: "127.0.0.1:0", Token: "tok-0123456789"})
	for _, dial := range []func() (net.Conn, error){
		func() (net.Conn, error) { return net.Dial("unix", filepath.Join(f.StateDir, record.ServeSocketFile)) },
		func() (net.Conn, error) { return net.Dial("tcp", s.ServeAddr()) },
	} {
		for _, tc := range []struct {
			headers, body string
			want          int
		}{
			{"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n", 400},
			{"Content-Length: 2\r\n", "{}", 201},
		} {
			c, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-0123456789\r\nContent-Type: application/json\r\n%s\r\n%s", tc.headers, tc.body)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			c.Close()
			if resp.StatusCode != tc.want || tc.want == 400 && !strings.Contains(string(b), "ambiguous_framing") {
				t.Errorf("%q: %d %s, want %d", tc.headers, resp.StatusCode, b, tc.want)
			}
		}
	}
}

// The attack of issue 24: a process in a user namespace of its own (what
// every sandbox kusaw builds has) that can see serve's socket posts a run.
// serve answers 403 peer_refused and queues nothing. The twin: the same
// request from the host is served.
func TestServeRefusesSandboxedPeer(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("this test needs curl (apt-get install curl)")
	}
	f := serveFactory(t, "pipelines:\n  default: [a]\nsteps:\n  a:\n    run: [\"true\"]\n")
	_, c, _ := startServer(t, f, ServeOptions{MaxParallel: 1})
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)
	post := func(attr *syscall.SysProcAttr) string {
		cmd := exec.Command(curl, "-sS", "--max-time", "10", "--unix-socket", sock, "-w", "\nHTTP %{http_code}\n",
			"-H", "Content-Type: application/json", "-d", `{"pipeline":"default"}`, "http://serve/v1/runs")
		cmd.SysProcAttr = attr
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		return string(out)
	}
	sandboxed := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}}
	out := post(sandboxed)
	if !strings.Contains(out, "HTTP 403") || !strings.Contains(out, `"peer_refused"`) || !strings.Contains(out, "another user namespace") {
		t.Fatalf("a peer in another user namespace was not refused:\n%s", out)
	}
	if runs, err := c.Runs(); err != nil || len(runs) != 0 {
		t.Fatalf("the refused peer queued a run: %v %v", runs, err)
	}
	if out := post(nil); !strings.Contains(out, "HTTP 201") {
		t.Fatalf("the host's request was not served:\n%s", out)
	}
	if runs, err := c.Runs(); err != nil || len(runs) != 1 {
		t.Fatalf("the host's run: %v %v", runs, err)
	}
}
