package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kusaw/kusaw/internal/httpframe"
)

// Limits bound what a client of serve's API can hold: how long a request
// may take to arrive and to be answered, how long an idle connection stays
// open, and how many connections one listener (and, on TCP, one client
// address) may have open at once. They keep a client without the token
// from exhausting serve's file descriptors; the Unix socket has its own
// server and its own count, so no TCP load can take its place.
type Limits struct {
	ReadHeader time.Duration // the request line and headers
	Read       time.Duration // the whole request, body included
	Write      time.Duration // the response (each flush, for an event stream)
	Idle       time.Duration // between requests on a kept-alive connection
	// MaxHeaderBytes bounds a request's headers (431 beyond).
	MaxHeaderBytes int
	// MaxConns bounds the open connections of the TCP listener;
	// MaxUnixConns those of the Unix socket.
	MaxConns, MaxUnixConns int
	// MaxConnsPerAddr bounds the open TCP connections of one client address.
	MaxConnsPerAddr int
}

// DefaultLimits are serve's limits unless ServeOptions.Limits sets some
// (docs/serve.md).
func DefaultLimits() Limits {
	return Limits{
		ReadHeader:      10 * time.Second,
		Read:            30 * time.Second,
		Write:           30 * time.Second,
		Idle:            60 * time.Second,
		MaxHeaderBytes:  64 << 10,
		MaxConns:        256,
		MaxUnixConns:    128,
		MaxConnsPerAddr: 32,
	}
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	pick := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	pickInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.ReadHeader, d.ReadHeader)
	pick(&l.Read, d.Read)
	pick(&l.Write, d.Write)
	pick(&l.Idle, d.Idle)
	pickInt(&l.MaxHeaderBytes, d.MaxHeaderBytes)
	pickInt(&l.MaxConns, d.MaxConns)
	pickInt(&l.MaxUnixConns, d.MaxUnixConns)
	pickInt(&l.MaxConnsPerAddr, d.MaxConnsPerAddr)
	return l
}

// httpServer is one listener's server with the limits' timeouts.
func (l Limits) httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: refuseAmbiguous(h), ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read, WriteTimeout: l.Write,
		IdleTimeout: l.Idle, MaxHeaderBytes: l.MaxHeaderBytes, ConnContext: httpframe.ConnContext}
}

// refuseAmbiguous answers 400 and closes the connection for a request that
// carried both Content-Length and Transfer-Encoding (the listener is
// wrapped by httpframe.Listener).
func refuseAmbiguous(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if httpframe.Ambiguous(r) {
			w.Header().Set("Connection", "close")
			apiError(w, http.StatusBadRequest, "ambiguous_framing", "the request has both Content-Length and Transfer-Encoding", "send one of them")
			return
		}
		if r.Method == http.MethodConnect {
			// No tunnels here; httpframe stops following a connection
			// after a CONNECT, so it must end.
			w.Header().Set("Connection", "close")
			apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", "CONNECT is not served", "serve's API is plain HTTP requests")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// capListener refuses connections beyond its caps at once, with a 503 and
// a close, rather than leaving them in the kernel's queue: a client over
// its share learns it, and the accept loop keeps serving the others.
type capListener struct {
	net.Listener
	max, perAddr int // perAddr 0: no per-address cap (the Unix socket)

	mu     sync.Mutex
	open   int
	byAddr map[string]int
	// refusing bounds the goroutines answering refused connections.
	refusing chan struct{}
}

func newCapListener(ln net.Listener, max, perAddr int) *capListener {
	return &capListener{Listener: ln, max: max, perAddr: perAddr, byAddr: map[string]int{}, refusing: make(chan struct{}, 64)}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := ""
		if l.perAddr > 0 {
			addr = c.RemoteAddr().String()
			if h, _, err := net.SplitHostPort(addr); err == nil {
				addr = h
			}
		}
		l.mu.Lock()
		why := ""
		switch {
		case l.open >= l.max:
			why = fmt.Sprintf("serve has %d connections open on this listener (its limit)", l.open)
		case l.perAddr > 0 && l.byAddr[addr] >= l.perAddr:
			why = fmt.Sprintf("this address has %d connections open (the limit per client)", l.byAddr[addr])
		}
		if why == "" {
			l.open++
			if l.perAddr > 0 {
				l.byAddr[addr]++
			}
		}
		l.mu.Unlock()
		if why == "" {
			return &capConn{Conn: c, l: l, addr: addr}, nil
		}
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				refuseConn(c, why)
			}()
		default:
			c.Close()
		}
	}
}

// Open is the number of connections the listener holds.
func (l *capListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *capListener) release(addr string) {
	l.mu.Lock()
	l.open--
	if l.perAddr > 0 {
		if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
			delete(l.byAddr, addr)
		}
	}
	l.mu.Unlock()
}

func refuseConn(c net.Conn, why string) {
	answerAndClose(c, "503 Service Unavailable", "too_many_connections", why, "close idle connections and retry")
}

// refusePeer answers a peer the Unix socket does not serve (a process in
// a sandbox: peercred.HostPeer) with a 403 that says why, and closes. The
// request head is read first (briefly, bounded), so the client sees the
// answer rather than a broken pipe.
func refusePeer(c net.Conn, err error) {
	c.SetReadDeadline(time.Now().Add(time.Second))
	br := bufio.NewReaderSize(io.LimitReader(c, 64<<10), 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil || len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	answerAndClose(c, "403 Forbidden", "peer_refused", "serve refused the connection: "+err.Error(),
		"kusaw serve's socket serves only processes outside every sandbox: run the command on the host")
}

func answerAndClose(c net.Conn, status, code, msg, fix string) {
	defer c.Close()
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg, "fix": fix}})
	body := string(b) + "\n"
	c.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(body), body)
}

type capConn struct {
	net.Conn
	l    *capListener
	addr string
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}
