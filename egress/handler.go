package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"

	"github.com/kusaw/kusaw/internal/httpframe"
)

// reqClass is what a request asks of the proxy, before any policy.
type reqClass struct {
	kind   string // KindConnect, KindHTTP, KindWebSocket, KindInject, or "" when bad
	host   string // as the client wrote it
	port   int
	inject string
	bad    string // why the request is not one the proxy serves
}

// classify reads a request's target: CONNECT host:port, an absolute-form
// http:// URL (a WebSocket upgrade when it asks for one), or an
// origin-form request to an inject endpoint.
func classify(r *http.Request, listenAddr string) reqClass {
	if r.Method == http.MethodConnect {
		auth := r.RequestURI
		if strings.HasPrefix(auth, "/") || auth == "" {
			return reqClass{bad: "CONNECT needs a host:port target"}
		}
		h, ps, err := net.SplitHostPort(auth)
		if err != nil || h == "" {
			return reqClass{bad: "CONNECT needs a host:port target"}
		}
		port, ok := parsePort(ps)
		if !ok {
			return reqClass{bad: fmt.Sprintf("CONNECT port %q is not a number from 1 to 65535", sanitize(ps))}
		}
		return reqClass{kind: KindConnect, host: h, port: port}
	}
	if r.URL.IsAbs() {
		if !strings.EqualFold(r.URL.Scheme, "http") {
			return reqClass{bad: fmt.Sprintf("%s:// URLs go through CONNECT; only http:// is proxied in plain", sanitize(r.URL.Scheme))}
		}
		h := r.URL.Hostname()
		if h == "" {
			return reqClass{bad: "the URL has no host"}
		}
		port := 80
		if ps := r.URL.Port(); ps != "" {
			var ok bool
			if port, ok = parsePort(ps); !ok {
				return reqClass{bad: fmt.Sprintf("port %q is not a number from 1 to 65535", sanitize(ps))}
			}
		}
		if name, ok := injectName(r.URL.Path); ok && isLocal(h, port, listenAddr) {
			// A client that ignores NO_PROXY sends the inject URL to the
			// proxy in absolute form.
			return reqClass{kind: KindInject, inject: name}
		}
		kind := KindHTTP
		if up := r.Header.Get("Upgrade"); up != "" {
			if !strings.EqualFold(strings.TrimSpace(up), "websocket") {
				return reqClass{bad: fmt.Sprintf("only WebSocket upgrades are relayed, not %q", sanitize(up))}
			}
			kind = KindWebSocket
		}
		return reqClass{kind: kind, host: h, port: port}
	}
	if name, ok := injectName(r.URL.Path); ok {
		return reqClass{kind: KindInject, inject: name}
	}
	return reqClass{bad: "this is kusaw's egress proxy: send CONNECT host:port or an absolute http:// URL"}
}

func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, _ := strconv.Atoi(s)
	return n, n >= 1 && n <= 65535
}

func injectName(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, injectPrefix)
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "/")
	return name, name != ""
}

func isLocal(host string, port int, listenAddr string) bool {
	_, lp, _ := net.SplitHostPort(listenAddr)
	if strconv.Itoa(port) != lp {
		return false
	}
	return host == "127.0.0.1" || strings.EqualFold(host, "localhost")
}

// ServeHTTP serves one request on a lease's listener.
func (l *Lease) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !l.enter() {
		writeRefusal(w, &refusal{status: 503, reason: ReasonLeaseClosed, line: "kusaw: the attempt's egress lease is closed"})
		return
	}
	defer l.wg.Done()
	if httpframe.Ambiguous(r) {
		// Refused before anything is forwarded: an upstream that picks
		// the other header would see two requests where one was sent.
		line := "kusaw: the request has both Content-Length and Transfer-Encoding; send one of them"
		l.record(Decision{Kind: KindHTTP, Host: sanitize(r.Host), Decision: Refuse, Reason: ReasonBadRequest, Detail: line})
		writeRefusal(w, &refusal{status: 400, reason: ReasonBadRequest, line: line})
		return
	}
	rc := classify(r, l.listenAddr)
	switch rc.kind {
	case KindConnect:
		l.serveConnect(w, r, rc)
	case KindHTTP, KindWebSocket:
		l.serveForward(w, r, rc)
	case KindInject:
		ij := l.injects[rc.inject]
		if ij == nil {
			writeRefusal(w, &refusal{status: 404, reason: ReasonBadRequest, line: fmt.Sprintf("kusaw: no inject named %q on this lease", sanitize(rc.inject))})
			return
		}
		if !ij.authorized(r.URL.Path) {
			line := fmt.Sprintf("kusaw: the inject URL for %s lacks this lease's token; use the base URL kusaw put in %s", rc.inject, ij.in.BaseURLEnv)
			l.record(Decision{Kind: KindInject, Host: ij.host, Port: ij.port, Decision: Refuse, Reason: ReasonBadRequest, Detail: line})
			writeRefusal(w, &refusal{status: 403, reason: ReasonBadRequest, line: line})
			return
		}
		raw, ok := strings.CutPrefix(r.URL.EscapedPath(), ij.prefix)
		_, _, rule := injectPath(raw)
		if !ok {
			rule = "the lease's prefix must not be %-encoded"
		}
		if rule != "" {
			line := fmt.Sprintf("kusaw: inject %s: %s, so the key stays under %s (%s)", rc.inject, rule, ij.base.Redacted(), ReasonInjectPath)
			l.record(Decision{Kind: KindInject, Host: ij.host, Port: ij.port, Decision: Refuse, Reason: ReasonInjectPath, Detail: line})
			writeRefusal(w, &refusal{status: 403, reason: ReasonInjectPath, line: line})
			return
		}
		ij.rp.ServeHTTP(w, r)
	default:
		line := "kusaw: " + rc.bad
		l.record(Decision{Kind: KindHTTP, Host: sanitize(r.Host), Decision: Refuse, Reason: ReasonBadRequest, Detail: line})
		writeRefusal(w, &refusal{status: 400, reason: ReasonBadRequest, line: line})
	}
}

// writeStatus writes a whole response whose status line carries the
// reason (Go clients show only the status) and whose body is that line.
func writeStatus(w io.Writer, status int, line string) error {
	line = sanitize(line)
	_, err := fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, line, len(line)+1, line)
	return err
}

func writeRefusal(w http.ResponseWriter, ref *refusal) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, ref.line, ref.status)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	writeStatus(brw.Writer, ref.status, ref.line)
	brw.Flush()
}

var discardLog = log.New(io.Discard, "", 0)

// serveForward proxies an absolute-form http:// request, or relays a
// WebSocket upgrade, to the one admitted address.
func (l *Lease) serveForward(w http.ResponseWriter, r *http.Request, rc reqClass) {
	t, ref := l.admit(r.Context(), rc.kind, rc.host, rc.port, 80, false)
	if ref != nil {
		writeRefusal(w, ref)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = hostPort(t.host, t.port)
		},
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				mc, ref := l.dial(ctx, t)
				if ref != nil {
					return nil, ref
				}
				return mc, nil
			},
			// One connection per request, so each request's bytes are
			// its own decision.
			DisableKeepAlives:  true,
			DisableCompression: true,
		},
		FlushInterval: -1,
		ErrorLog:      discardLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ref *refusal
			if errors.As(err, &ref) {
				writeRefusal(w, ref)
				return
			}
			if r.Context().Err() != nil {
				return
			}
			writeRefusal(w, &refusal{status: 502, reason: ReasonUnreachable, line: fmt.Sprintf("kusaw: %s failed: %s", hostPort(t.host, t.port), upstreamMsg(err))})
		},
	}
	rp.ServeHTTP(w, r)
}

func upstreamMsg(err error) string {
	if errors.Is(err, errBudget) {
		return "the egress budget was reached"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "the upstream closed the connection"
	}
	return sanitize(err.Error())
}

// serveConnect admits and dials a CONNECT target, then runs the tunnel.
func (l *Lease) serveConnect(w http.ResponseWriter, r *http.Request, rc reqClass) {
	t, ref := l.admit(r.Context(), KindConnect, rc.host, rc.port, 443, false)
	if ref != nil {
		writeRefusal(w, ref)
		return
	}
	up, ref := l.dial(r.Context(), t)
	if ref != nil {
		writeRefusal(w, ref)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		return
	}
	httpframe.Stop(r)
	client, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !l.track(client) {
		client.Close()
		up.Close()
		return
	}
	defer l.untrack(client)
	client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		up.Close()
		return
	}
	l.tunnel(client, brw.Reader, up, t)
}

// tunnel checks what the client sends first (a TLS ClientHello naming
// the CONNECT host, or plain HTTP on port 80) and relays.
func (l *Lease) tunnel(client net.Conn, br *bufio.Reader, up *meteredConn, t *target) {
	defer up.Close()
	defer client.Close()
	if t.loopback {
		// A local service: the destination is the host's own port
		// whatever the bytes say, so any protocol may cross.
		l.relay(client, br, up, up)
		return
	}
	where := hostPort(t.host, t.port)
	client.SetReadDeadline(time.Now().Add(l.p.o.HandshakeTimeout))
	first, err := br.Peek(1)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			up.end(Close, ReasonSNIMissing, fmt.Sprintf("kusaw: the tunnel to %s sent no TLS ClientHello within %s; closed", where, l.p.o.HandshakeTimeout))
		}
		return
	}
	if first[0] == recordTypeHandshake {
		raw, sni, err := readClientHello(br)
		switch {
		case err != nil:
			up.end(Close, ReasonSNIMissing, fmt.Sprintf("kusaw: the TLS ClientHello in the tunnel to %s is unreadable (%v); closed", where, err))
			return
		case sni == "":
			up.end(Close, ReasonSNIMissing, fmt.Sprintf("kusaw: the TLS ClientHello in the tunnel to %s names no server (SNI); closed", where))
			return
		}
		if name, err := config.NormalizeHostName(sni); err != nil || name != t.host {
			up.end(Close, ReasonSNIMismatch, fmt.Sprintf("kusaw: the tunnel to %s names %q in TLS (SNI); closed", where, sanitize(sni)))
			return
		}
		client.SetReadDeadline(time.Time{})
		if _, err := up.Write(raw); err != nil {
			return
		}
		l.relay(client, br, up, up)
		return
	}
	if t.port == l.p.plainTunnelPort && looksLikeHTTP(br) {
		l.httpInTunnel(client, br, up, t)
		return
	}
	up.end(Close, ReasonNotTLS, fmt.Sprintf("kusaw: the tunnel to %s carried bytes that are not TLS; closed", where))
}

// looksLikeHTTP peeks at a request line's method token.
func looksLikeHTTP(br *bufio.Reader) bool {
	b, _ := br.Peek(8)
	i := 0
	for i < len(b) && b[i] >= 'A' && b[i] <= 'Z' {
		i++
	}
	return i >= 3 && i < len(b) && b[i] == ' '
}

// Tunnels start with small buffers; one that has moved a megabyte is a
// bulk transfer and gets a large one, which on loopback roughly doubles
// throughput (fewer, larger reads and writes) without making every idle
// tunnel hold half a megabyte.
var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	bigBufs   = sync.Pool{New: func() any { b := make([]byte, 512<<10); return &b }}
)

const bulkAfter = 1 << 20

// relay copies both ways until both sides are done. A half-close on one
// side is passed on; an error on either closes both.
func (l *Lease) relay(client net.Conn, br *bufio.Reader, up *meteredConn, upR io.Reader) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); up.Close() }) }
	act := up.act
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			if _, err := up.Write(b); err != nil {
				closeBoth()
				return
			}
			br.Discard(n)
		}
		err := pump(up.Write, func(p []byte) (int, error) { return idleRead(client, act, p) })
		if err == nil {
			up.CloseWrite()
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			up.end(Allow, ReasonIdle, "")
		}
		closeBoth()
	}()
	err := pump(func(p []byte) (int, error) { return idleWrite(client, act, p) }, upR.Read)
	if err == nil {
		// Pass the upstream's end of data on; a client that cannot take a
		// half-close gets the whole connection closed.
		if cw, ok := client.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
			closeBoth()
		}
	} else {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			up.end(Allow, ReasonIdle, "")
		}
		closeBoth()
	}
	<-done
	closeBoth()
}

// pump copies until src reports EOF (nil) or an error.
func pump(write func([]byte) (int, error), read func([]byte) (int, error)) error {
	sp := smallBufs.Get().(*[]byte)
	defer smallBufs.Put(sp)
	buf := *sp
	var moved int
	for {
		n, err := read(buf)
		if n > 0 {
			if _, werr := write(buf[:n]); werr != nil {
				return werr
			}
			if moved += n; moved >= bulkAfter && len(buf) == len(*sp) {
				bp := bigBufs.Get().(*[]byte)
				defer bigBufs.Put(bp)
				buf = *bp
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// httpInTunnel serves a CONNECT to port 80 that carries plain HTTP: each
// request must name the tunnel's host and is checked like a plain one.
func (l *Lease) httpInTunnel(client net.Conn, br *bufio.Reader, up *meteredConn, t *target) {
	where := hostPort(t.host, t.port)
	upBr := bufio.NewReader(up)
	refuse := func(status int, reason, line string) {
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		writeStatus(client, status, line)
		up.end(Close, reason, line)
	}
	for {
		client.SetReadDeadline(time.Now().Add(l.p.o.IdleTimeout))
		req, err := http.ReadRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
				refuse(400, ReasonBadRequest, fmt.Sprintf("kusaw: a request in the tunnel to %s is not valid HTTP; closed", where))
			}
			return
		}
		client.SetReadDeadline(time.Time{})
		h, ps, serr := net.SplitHostPort(req.Host)
		if serr != nil {
			h, ps = req.Host, "80"
		}
		name, nerr := config.NormalizeHostName(h)
		port, pok := parsePort(ps)
		if nerr != nil || !pok || name != t.host || port != t.port {
			refuse(403, ReasonNotAllowed, fmt.Sprintf("kusaw: a request in the tunnel to %s is for %q; only %s is allowed there", where, sanitize(req.Host), where))
			return
		}
		if why := l.budget.exhausted(t.host); why != "" {
			refuse(403, why, l.budgetLine(t.host, why))
			return
		}
		if upg := req.Header.Get("Upgrade"); upg != "" && !strings.EqualFold(strings.TrimSpace(upg), "websocket") {
			refuse(400, ReasonBadRequest, fmt.Sprintf("kusaw: only WebSocket upgrades are relayed, not %q", sanitize(upg)))
			return
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // keep Go from adding its own
		}
		if err := req.Write(up); err != nil {
			return
		}
		resp, err := http.ReadResponse(upBr, req)
		if err != nil {
			refuse(502, ReasonUnreachable, fmt.Sprintf("kusaw: %s sent no valid response: %s", where, upstreamMsg(err)))
			return
		}
		client.SetWriteDeadline(time.Time{})
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if err := resp.Write(client); err != nil {
				return
			}
			l.relay(client, br, up, upBr)
			return
		}
		werr := resp.Write(client)
		resp.Body.Close()
		if werr != nil || resp.Close || req.Close {
			return
		}
	}
}
