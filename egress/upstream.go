package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/config"
)

// Upstream is a corporate proxy kusaw's proxy reaches allowed hosts
// through, with CONNECT, after its own checks. Its address is the
// factory's own configuration: the address guard does not apply to it.
type Upstream struct {
	// URL is http://HOST:PORT or https://HOST:PORT, without credentials.
	URL string
	// Auth is "user:password" for Proxy-Authorization (Basic); never
	// logged or printed.
	Auth string
	// NoProxy are hosts dialled directly (and resolved and guarded by
	// kusaw itself).
	NoProxy []config.HostPattern
}

// String keeps the credentials out of any printed form.
func (u *Upstream) String() string { return u.URL }

// GoString implements fmt.GoStringer for %#v.
func (u *Upstream) GoString() string { return "upstream_proxy " + u.URL }

func (u *Upstream) bypass(host string) bool {
	for _, p := range u.NoProxy {
		if p.MatchesName(host) {
			return true
		}
	}
	return false
}

// dialUpstream opens a tunnel to t through the upstream proxy. A proxy
// that is down, refuses, or wants credentials gives the step a 502 whose
// line names upstream_proxy and what it answered; it is logged.
func (l *Lease) dialUpstream(ctx context.Context, t *target) (*meteredConn, *refusal) {
	up := t.upstream
	fail := func(format string, args ...any) (*meteredConn, *refusal) {
		line := fmt.Sprintf("kusaw: upstream_proxy %s: ", up.URL) + fmt.Sprintf(format, args...)
		l.record(Decision{Time: t.start, Kind: t.kind, Host: t.host, Port: t.port,
			Decision: Fail, Reason: ReasonUpstreamProxy, Detail: line, Rule: t.rule, Duration: time.Since(t.start)})
		return nil, &refusal{status: 502, reason: ReasonUpstreamProxy, line: line}
	}
	u, err := url.Parse(up.URL)
	if err != nil {
		return fail("not a URL")
	}
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = append(addrs, a)
	} else if addrs, err = l.p.lookup(ctx, u.Hostname()); err != nil || len(addrs) == 0 {
		msg := "no address"
		if err != nil {
			msg = lookupMsg(err)
		}
		return fail("cannot resolve %s: %s", u.Hostname(), msg)
	}
	port, _ := strconv.Atoi(u.Port())
	d := net.Dialer{Timeout: l.p.o.DialTimeout}
	var c net.Conn
	for _, a := range addrs {
		if c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String()); err == nil {
			break
		}
	}
	if err != nil {
		return fail("unreachable: %s", dialMsg(err))
	}
	if u.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: u.Hostname(), RootCAs: l.c.RootCAs, MinVersion: tls.VersionTLS12})
		tc.SetDeadline(time.Now().Add(l.p.o.HandshakeTimeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return fail("TLS to the proxy failed: %s", sanitize(err.Error()))
		}
		tc.SetDeadline(time.Time{})
		c = tc
	}
	where := hostPort(t.host, t.port)
	if len(t.addrs) > 0 {
		// kusaw checked these (audit mode): the upstream dials one of
		// them, not a name it might resolve to somewhere else.
		where = netip.AddrPortFrom(t.addrs[0].Unmap(), uint16(t.port)).String()
	}
	req := "CONNECT " + where + " HTTP/1.1\r\nHost: " + where + "\r\n"
	if up.Auth != "" {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(up.Auth)) + "\r\n"
	}
	c.SetDeadline(time.Now().Add(l.p.o.DialTimeout))
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return fail("the connection closed: %s", dialMsg(err))
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fail("closed the connection without answering CONNECT %s", where)
		}
		return fail("no valid answer to CONNECT %s: %s", where, sanitize(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		status := strings.TrimSpace(resp.Status)
		if resp.StatusCode == http.StatusProxyAuthRequired {
			fix := "set upstream_proxy.credentials: {secret: KEY} (value user:password)"
			if up.Auth != "" {
				fix = "check the credentials' secret"
			}
			return fail("answered %s to CONNECT %s; %s", status, where, fix)
		}
		return fail("answered %s to CONNECT %s", status, where)
	}
	c.SetDeadline(time.Time{})
	var conn net.Conn = c
	if br.Buffered() > 0 {
		conn = &prefixConn{Conn: c, r: io.MultiReader(io.LimitReader(br, int64(br.Buffered())), c)}
	}
	mc := newMeteredConn(l, t, conn)
	if !l.track(mc) {
		c.Close()
		return nil, &refusal{status: 503, reason: ReasonLeaseClosed, line: "kusaw: the attempt's egress lease is closed"}
	}
	return mc, nil
}

// prefixConn reads what the proxy sent after its answer before the rest.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *prefixConn) CloseWrite() error {
	if cw, ok := p.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
