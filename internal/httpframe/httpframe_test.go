package httpframe

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs a server whose handler refuses ambiguous requests the way
// kusaw's do, and reports the bodies it served.
func serve(t *testing.T) (string, chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	srv := &http.Server{ConnContext: ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Ambiguous(r) {
			w.Header().Set("Connection", "close")
			http.Error(w, "both Content-Length and Transfer-Encoding", http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(r.Body)
		got <- r.URL.Path + ":" + string(b)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(Listener(ln))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), got
}

func exchange(t *testing.T, addr, raw string, n int) []int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, raw)
	br := bufio.NewReader(c)
	var codes []int
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

// The smuggling shape: both headers. net/http alone would serve it (it
// drops Content-Length); with the guard it is refused.
func TestAmbiguousRequestRefused(t *testing.T) {
	addr, got := serve(t)
	for _, h := range []string{
		"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
		"content-length: 3\r\ntransfer-encoding: Chunked\r\n",
		"Content-Length : 3\r\nTransfer-Encoding: chunked\r\n",
	} {
		raw := "POST /a HTTP/1.1\r\nHost: x\r\n" + h + "\r\n3\r\nabc\r\n0\r\n\r\n"
		if codes := exchange(t, addr, raw, 1); len(codes) != 1 || codes[0] != 400 {
			t.Errorf("%q: %v, want 400", h, codes)
		}
	}
	select {
	case b := <-got:
		t.Fatalf("an ambiguous request was served: %s", b)
	default:
	}
}

// The twin: either header alone, pipelined, with chunk extensions and
// trailers, and bodies that look like heads, all served.
func TestPlainRequestsServed(t *testing.T) {
	addr, got := serve(t)
	fakeHead := "POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	raw := "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" +
		"POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n" +
		fmt.Sprintf("POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(fakeHead), fakeHead) +
		"GET /get HTTP/1.1\r\nHost: x\r\n\r\n"
	codes := exchange(t, addr, raw, 4)
	if fmt.Sprint(codes) != "[200 200 200 200]" {
		t.Fatalf("codes %v", codes)
	}
	want := []string{"/cl:abc", "/te:abcde", "/body:" + fakeHead, "/get:"}
	for _, w := range want {
		if b := <-got; b != w {
			t.Fatalf("served %q, want %q", b, w)
		}
	}
	// A request after an ambiguous one on the same connection is not served.
	raw = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n"
	if codes := exchange(t, addr, raw, 2); len(codes) != 1 || codes[0] != 400 {
		t.Fatalf("smuggled follow-up: %v", codes)
	}
	select {
	case b := <-got:
		if strings.HasPrefix(b, "/after") {
			t.Fatalf("the request after an ambiguous one was served")
		}
	case <-time.After(100 * time.Millisecond):
	}
}

// TestStopEndsFollowing: after Stop (a CONNECT's tunnel) the bytes are not
// parsed as requests, so a tunnel's payload can never mark the connection.
func TestStopEndsFollowing(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := NewConn(a)
	c.Stop()
	go b.Write([]byte("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"))
	buf := make([]byte, 256)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	if c.Ambiguous() {
		t.Fatal("bytes read after Stop were followed as a request")
	}
}

// A head that stops arriving is answered 408 and closed; an idle
// connection is closed quietly.
func TestSlowHeadAnswered408(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, ConnContext: ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(Listener(ln))
	defer srv.Close()
	read := func(send string) string {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, send)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("%q: %v (the server did not close)", send, err)
		}
		return string(b)
	}
	if got := read("GET / HTTP/1.1\r\nHost: x\r\n"); !strings.HasPrefix(got, "HTTP/1.1 408 ") || !strings.HasSuffix(got, "did not arrive in time\n") {
		t.Fatalf("slow head: %q", got)
	}
	if got := read("GET / HT"); !strings.HasPrefix(got, "HTTP/1.1 408 ") {
		t.Fatalf("slow request line: %q", got)
	}
	if got := read(""); got != "" {
		t.Fatalf("idle connection: %q", got)
	}
	// The twin: a whole request, then idle: its answer, then a quiet close.
	if got := read("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 ") || strings.Contains(got, "408") {
		t.Fatalf("whole request: %q", got)
	}
}

// After a CONNECT the connection's bytes are a tunnel's and are not
// followed (a server without tunnels closes it).
func TestConnectStopsFollowing(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	c := NewConn(b)
	go io.WriteString(a, "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
	buf := make([]byte, 4096)
	n := 0
	for n < 100 {
		k, err := c.Read(buf[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	if c.Ambiguous() || !c.raw {
		t.Fatalf("after CONNECT: ambiguous %v, raw %v", c.Ambiguous(), c.raw)
	}
}
