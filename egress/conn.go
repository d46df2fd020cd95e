package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// target is an admitted destination: the host as checked, the addresses
// the guard passed, and the rule that admitted it.
type target struct {
	kind     string
	host     string
	port     int
	rule     string
	addrs    []netip.Addr
	loopback bool      // localhost: answered without DNS, loopback is fine
	upstream *Upstream // dialled through this proxy (CONNECT), not directly
	start    time.Time
}

func (t *target) addrStrings() []string {
	out := make([]string, len(t.addrs))
	for i, a := range t.addrs {
		out[i] = a.String()
	}
	return out
}

// refusal is a request the proxy answers itself: a 403 for policy, a
// 502/504 for an upstream it could not reach. It is also an error, so a
// dial function can return it through net/http.
type refusal struct {
	status int
	reason string
	line   string
}

func (r *refusal) Error() string { return r.line }

// hostPort formats host:port for messages.
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// admit applies the policy to a destination through decide (the
// allowlist, unless skipRule: inject upstreams are the factory's own; the
// address guard on what the name resolves to), then the budgets. The
// refusal, or in audit mode the would-be refusal, is recorded here.
func (l *Lease) admit(ctx context.Context, kind, rawHost string, port, defPort int, skipRule bool) (*target, *refusal) {
	start := time.Now()
	v := l.p.decide(ctx, l.policy(), rawHost, port, defPort, skipRule)
	t := &target{kind: kind, host: v.Host, port: port, addrs: v.Addrs, loopback: v.Local, start: start}
	if v.Upstream != "" {
		t.upstream = l.c.Upstream
	}
	if t.rule = v.Rule; v.Origin != "" {
		t.rule += " (" + v.Origin + ")"
	}
	refuse := func(status int, decision, reason, line string) (*target, *refusal) {
		l.record(Decision{Time: t.start, Kind: kind, Host: t.host, Port: port, Addrs: t.addrStrings(),
			Decision: decision, Reason: reason, Detail: line, Rule: t.rule, Duration: time.Since(t.start)})
		return nil, &refusal{status: status, reason: reason, line: line}
	}
	if !v.Allowed {
		decision := Refuse
		if v.Status >= 500 {
			decision = Fail
		}
		return refuse(v.Status, decision, v.Reason, v.Line)
	}
	if why := l.budget.exhausted(t.host); why != "" {
		return refuse(403, Refuse, why, l.budgetLine(t.host, why))
	}
	if v.WouldRefuse {
		l.record(Decision{Time: t.start, Kind: kind, Host: t.host, Port: port, Addrs: t.addrStrings(),
			Decision: WouldRefuse, Reason: v.Reason, Detail: v.Line, Rule: AuditRule})
		t.rule = AuditRule
	}
	return t, nil
}

func lookupMsg(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		if de.IsNotFound {
			return "no such host"
		}
		if de.IsTimeout {
			return "the DNS server did not answer"
		}
		return de.Err
	}
	return err.Error()
}

// sanitize makes client-supplied text safe for a status line and a log.
func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

var errAddrChanged = errors.New("the connection is not to the address that was checked")

// dial connects to exactly one of the checked addresses: the literal
// address goes to connect(2), so nothing resolves the name a second time,
// and the address is checked again at connect and once connected.
func (l *Lease) dial(ctx context.Context, t *target) (*meteredConn, *refusal) {
	if t.upstream != nil {
		return l.dialUpstream(ctx, t)
	}
	var firstErr error
	timeouts := 0
	for _, a := range t.addrs {
		want := a
		d := net.Dialer{
			Timeout: l.p.o.DialTimeout,
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil || ap.Addr().Unmap() != want.Unmap() {
					return errAddrChanged
				}
				if !t.loopback && checkAddr(ap.Addr(), l.c.AllowRanges) != "" {
					return errAddrChanged
				}
				if l.p.dialCheck != nil {
					return l.p.dialCheck(ap.Addr())
				}
				return nil
			},
		}
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(t.port)).String())
		if err == nil {
			ra, ok := c.RemoteAddr().(*net.TCPAddr)
			if !ok || ra.AddrPort().Addr().Unmap() != want.Unmap() {
				c.Close()
				err = errAddrChanged
			} else {
				mc := newMeteredConn(l, t, c.(*net.TCPConn))
				if !l.track(mc) {
					c.Close()
					return nil, &refusal{status: 503, reason: ReasonLeaseClosed, line: "kusaw: the attempt's egress lease is closed"}
				}
				return mc, nil
			}
		}
		if firstErr == nil {
			firstErr = err
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			timeouts++
		}
		if ctx.Err() != nil {
			break
		}
	}
	status, reason := 502, ReasonUnreachable
	line := fmt.Sprintf("kusaw: cannot reach %s: %s", hostPort(t.host, t.port), dialMsg(firstErr))
	if timeouts > 0 && timeouts == len(t.addrs) {
		status, reason = 504, ReasonTimeout
		line = fmt.Sprintf("kusaw: %s did not answer within %s", hostPort(t.host, t.port), l.p.o.DialTimeout)
	}
	l.record(Decision{Time: t.start, Kind: t.kind, Host: t.host, Port: t.port, Addrs: t.addrStrings(),
		Decision: Fail, Reason: reason, Detail: line, Rule: t.rule, Duration: time.Since(t.start)})
	return nil, &refusal{status: status, reason: reason, line: line}
}

func dialMsg(err error) string {
	switch {
	case err == nil:
		return "no address"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "no route to host"
	case errors.Is(err, errAddrChanged):
		return errAddrChanged.Error()
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// activity is the last time bytes moved on either side of a connection;
// shared by both sides so a one-way transfer is not idle.
type activity struct {
	last atomic.Int64
	idle time.Duration
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) expired() bool {
	return time.Since(time.Unix(0, a.last.Load())) >= a.idle
}

// idleRead reads with a deadline that turns into an idle timeout only
// when neither side moved a byte for the idle period.
func idleRead(c net.Conn, a *activity, p []byte) (int, error) {
	for {
		c.SetReadDeadline(time.Now().Add(a.idle))
		n, err := c.Read(p)
		if n > 0 {
			a.touch()
		}
		if n == 0 && err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !a.expired() {
			continue
		}
		return n, err
	}
}

func idleWrite(c net.Conn, a *activity, p []byte) (int, error) {
	c.SetWriteDeadline(time.Now().Add(a.idle))
	n, err := c.Write(p)
	if n > 0 {
		a.touch()
	}
	return n, err
}

var errBudget = errors.New("egress budget reached")

// meteredConn is an upstream connection: it counts bytes on the wire,
// charges what it sends to the budgets, applies the idle timeout, and
// reports its decision once, when it closes.
type meteredConn struct {
	// net.Conn, not *net.TCPConn: embedding the concrete type would
	// promote ReadFrom/WriteTo, and io.Copy would bypass the counting.
	net.Conn
	tcp  net.Conn // the TCP connection, or a TLS one to an upstream proxy
	l    *Lease
	t    *target
	act  *activity
	up   atomic.Int64
	down atomic.Int64

	// rmu and wmu are held across each Read and Write, so Close can wait
	// for one that already moved bytes to count them before reporting.
	rmu, wmu sync.Mutex

	mu       sync.Mutex
	decision string
	reason   string
	detail   string
	closed   bool
}

func newMeteredConn(l *Lease, t *target, c net.Conn) *meteredConn {
	mc := &meteredConn{Conn: c, tcp: c, l: l, t: t, act: &activity{idle: l.p.o.IdleTimeout}, decision: Allow}
	mc.act.touch()
	return mc
}

// end sets how the connection ends; the first policy reason wins.
func (c *meteredConn) end(decision, reason, detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason == "" {
		c.decision, c.reason, c.detail = decision, reason, detail
	}
}

func (c *meteredConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	n, err := idleRead(c.tcp, c.act, p)
	c.down.Add(int64(n))
	c.rmu.Unlock()
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.end(Allow, ReasonIdle, "")
	}
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	m, why := c.l.budget.take(c.t.host, len(p))
	n, err := idleWrite(c.tcp, c.act, p[:m])
	c.up.Add(int64(n))
	crossed := err == nil && m < len(p)
	if crossed {
		// Set before unlocking, so a Close that is waiting reports it.
		c.end(Close, why, c.l.budgetLine(c.t.host, why))
	}
	c.wmu.Unlock()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.end(Allow, ReasonIdle, "")
		}
		return n, err
	}
	if crossed {
		c.Close()
		return n, errBudget
	}
	return n, nil
}

// Close closes the connection and reports it.
func (c *meteredConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	err := c.tcp.Close()
	// Closing unblocks a Read or Write in progress; wait for it to count.
	c.rmu.Lock()
	c.wmu.Lock()
	c.wmu.Unlock()
	c.rmu.Unlock()
	c.mu.Lock()
	decision, reason, detail := c.decision, c.reason, c.detail
	c.mu.Unlock()
	c.l.record(Decision{Time: c.t.start, Kind: c.t.kind, Host: c.t.host, Port: c.t.port, Addrs: c.t.addrStrings(),
		Decision: decision, Reason: reason, Detail: detail, Rule: c.t.rule,
		BytesUp: c.up.Load(), BytesDown: c.down.Load(), Duration: time.Since(c.t.start)})
	c.l.untrack(c)
	return err
}

// CloseWrite relays a half-close upstream.
func (c *meteredConn) CloseWrite() error {
	if cw, ok := c.tcp.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
