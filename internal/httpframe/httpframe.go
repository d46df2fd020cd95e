// Package httpframe watches the HTTP/1.x requests a server reads, for what
// net/http does not show a handler. A request that carries both
// Content-Length and Transfer-Encoding is ambiguous (RFC 9112 §6.1 lets a
// server choose, and a server and a proxy that choose differently can be
// made to see two requests where one was sent); net/http drops
// Content-Length before a handler sees it. Listener wraps each accepted
// connection, follows its requests (heads, then bodies by their length or
// chunks) and marks the connection at the first ambiguous head; Ambiguous
// tells a handler so. And a head that stops arriving before the server's
// deadline, which net/http closes without a word, is answered 408.
//
// It imports nothing of kusaw.
package httpframe

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxLine bounds one line of a head or a chunk size; longer lines are left
// to net/http, which refuses them. (After an upgrade the bytes are a
// WebSocket's: following them as requests is harmless, since nothing asks
// about the connection any more.)
const maxLine = 64 << 10

// Listener wraps ln so that every connection it accepts is watched.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewConn(c), nil
}

type ctxKey struct{}

// ConnContext is for http.Server.ConnContext: it makes the connection
// known to Ambiguous.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, ctxKey{}, fc)
	}
	return ctx
}

// Ambiguous reports whether the connection r came on has sent a request
// with both Content-Length and Transfer-Encoding. The connection is then
// unusable: the caller answers 400 and closes it.
func Ambiguous(r *http.Request) bool {
	c, _ := r.Context().Value(ctxKey{}).(*Conn)
	return c != nil && c.Ambiguous()
}

// Conn follows the requests read through it.
type Conn struct {
	net.Conn
	mu  sync.Mutex
	st  state
	bad bool
	raw bool // a line or chunk net/http refuses: nothing more to follow
	// The line being read, the head's findings, what is left of a body.
	line       []byte
	lineTooBig bool
	first      bool // the next line of the head is its request line
	hasCL      bool
	hasTE      bool
	chunked    bool
	connect    bool
	left       int64
}

type state int

const (
	stHead      state = iota // request line and header lines
	stBody                   // left bytes of a Content-Length body
	stChunkSize              // a chunk-size line
	stChunkData              // left bytes of a chunk and its CRLF
	stTrailer                // trailer lines, until an empty one
)

// Ambiguous reports whether a request on the connection had both headers.
func (c *Conn) Ambiguous() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bad
}

func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	if n > 0 {
		c.feed(p[:n])
	}
	// A request head that stopped arriving before the server's deadline:
	// net/http closes such a connection without a word, so the client is
	// told why. (No response can be under way: the server reads a head
	// only when the one before is answered; an idle connection, with no
	// byte of a new head, is closed quietly.)
	partial := c.st == stHead && !c.raw && (len(c.line) > 0 || !c.first)
	c.mu.Unlock()
	var ne net.Error
	if err != nil && partial && errors.As(err, &ne) && ne.Timeout() {
		c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c.Conn, "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 35\r\nConnection: close\r\n\r\nthe request did not arrive in time\n")
	}
	return n, err
}

func (c *Conn) feed(b []byte) {
	for len(b) > 0 && !c.raw && !c.bad {
		switch c.st {
		case stBody, stChunkData:
			k := int64(len(b))
			if k > c.left {
				k = c.left
			}
			c.left -= k
			b = b[k:]
			if c.left == 0 {
				if c.st == stBody {
					c.startHead()
				} else {
					c.st = stChunkSize
				}
			}
		default:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				c.addLine(b)
				return
			}
			c.addLine(b[:i])
			b = b[i+1:]
			line := bytes.TrimSuffix(c.line, []byte{'\r'})
			c.lineDone(line)
			c.line = c.line[:0]
			c.lineTooBig = false
		}
	}
}

func (c *Conn) addLine(b []byte) {
	if len(c.line)+len(b) > maxLine {
		c.lineTooBig = true
		return
	}
	c.line = append(c.line, b...)
}

func (c *Conn) startHead() {
	c.st = stHead
	c.first = true
	c.hasCL, c.hasTE, c.chunked, c.left = false, false, false, 0
}

func (c *Conn) lineDone(line []byte) {
	if c.lineTooBig {
		c.raw = true // net/http refuses it; nothing more to follow
		return
	}
	switch c.st {
	case stHead:
		c.headLine(line)
	case stChunkSize:
		size := line
		if i := bytes.IndexByte(size, ';'); i >= 0 {
			size = size[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			c.raw = true // net/http refuses the body; stop following
		case n == 0:
			c.st = stTrailer
		default:
			c.st, c.left = stChunkData, n+2
		}
	case stTrailer:
		if len(line) == 0 {
			c.startHead()
		}
	}
}

func (c *Conn) headLine(line []byte) {
	if len(line) == 0 {
		if c.first {
			return // blank lines before a request line are allowed
		}
		c.endHead()
		return
	}
	if c.first {
		c.first = false
		// After a CONNECT the connection is a tunnel (or closed): its
		// bytes are not requests, and scanning them would only cost.
		// Servers that have no tunnels close on a CONNECT.
		c.connect = bytes.HasPrefix(line, []byte("CONNECT "))
		return
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return
	}
	name = bytes.TrimSpace(name)
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		c.hasCL = true
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64); err == nil && n >= 0 {
			c.left = n
		}
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		c.hasTE = true
		if bytes.Contains(bytes.ToLower(value), []byte("chunked")) {
			c.chunked = true
		}
	}
}

func (c *Conn) endHead() {
	switch {
	case c.hasCL && c.hasTE:
		c.bad = true
	case c.connect:
		c.raw = true
	case c.chunked:
		c.st = stChunkSize
	case c.hasCL && c.left > 0:
		c.st = stBody
	default:
		c.startHead()
	}
}

// Close is the underlying connection's Close.
func (c *Conn) Close() error { return c.Conn.Close() }

// Stop ends the following: after a CONNECT or an upgrade the bytes are a
// tunnel's, not requests, and need no parsing.
func (c *Conn) Stop() {
	c.mu.Lock()
	c.raw = true
	c.mu.Unlock()
}

// Stop ends the following of the connection r came on.
func Stop(r *http.Request) {
	if c, _ := r.Context().Value(ctxKey{}).(*Conn); c != nil {
		c.Stop()
	}
}

// NewConn wraps one connection (tests, and servers that accept their own).
func NewConn(nc net.Conn) *Conn {
	c := &Conn{Conn: nc}
	c.startHead()
	return c
}

// CloseWrite passes a half-close on to the connection, so a proxy relaying
// over a wrapped connection can tell the client the upstream is done
// while still reading what the client sends.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
