package egress

import (
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/httpframe"

	"github.com/kusaw/kusaw/egress/bridge"
)

// Lease is one attempt's handle on the proxy: its listener, allowlist,
// budgets, inject endpoints and decision log.
type Lease struct {
	p          *Proxy
	c          LeaseConfig
	listenAddr string
	sockPath   string
	unixLn     *net.UnixListener
	srv        *http.Server
	injects    map[string]*injector
	// injectToken is a random path segment of every inject URL, so only
	// a process given the URL (the step) can use the key: on macOS the
	// lease listens on the host's loopback, open to every local process.
	injectToken string
	budget      budget
	// localPorts are the host loopback ports of local-service entries,
	// sorted: the bridge listens on them inside the namespace.
	localPorts []int

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	localLns  []net.Listener
	conns     map[io.Closer]struct{}
	wg        sync.WaitGroup
	handed    chan struct{}
	handOnce  sync.Once
	quit      chan struct{} // closed by Close

	// peerPID is the process the sandbox runs in, set once by ExpectPeer
	// (which closes peerSet).
	peerPID  int
	peerSet  chan struct{}
	peerOnce sync.Once

	recMu     sync.Mutex
	hosts     map[string]*HostSummary
	decisions int
	refusals  int
	done      bool
	summary   Summary
}

// Compiled on first use: its {0,62} repetition makes a large program that
// every kusaw start (sandbox exec -- true included) would otherwise build.
var injectNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`) })

// Lease opens a lease. With SocketDir (Linux) it waits on a Unix socket
// for the bridge to hand over the listener it bound inside the sandbox;
// with Listen it listens itself.
func (p *Proxy) Lease(c LeaseConfig) (*Lease, error) {
	if c.ID == "" {
		return nil, errors.New("egress lease: an ID is required")
	}
	if c.PolicyKey == "" {
		c.PolicyKey = "sandbox.egress.allow"
	}
	if c.RangesKey == "" {
		c.RangesKey = "sandbox.egress.allow_ranges"
	}
	if c.BudgetKey == "" {
		c.BudgetKey = "sandbox.egress.budgets"
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	if c.Budgets.PerHost < 0 || c.Budgets.Total < 0 {
		return nil, errors.New("egress lease: budgets cannot be negative")
	}
	l := &Lease{
		p:       p,
		c:       c,
		conns:   map[io.Closer]struct{}{},
		handed:  make(chan struct{}),
		quit:    make(chan struct{}),
		peerSet: make(chan struct{}),
		hosts:   map[string]*HostSummary{},
		budget:  budget{perHost: c.Budgets.PerHost, total: c.Budgets.Total, used: map[string]int64{}},
	}
	l.srv = &http.Server{
		Handler:           l,
		ReadHeaderTimeout: p.o.HandshakeTimeout,
		IdleTimeout:       p.o.IdleTimeout,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext:       httpframe.ConnContext,
	}
	var tok [16]byte
	if _, err := crand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("egress lease: %v", err)
	}
	l.injectToken = hex.EncodeToString(tok[:])
	l.localPorts = LocalPorts(c.Allow)
	if len(l.localPorts) > MaxLocalPorts {
		return nil, fmt.Errorf("egress lease: %d local-service ports; at most %d (list only the ports the step uses)", len(l.localPorts), MaxLocalPorts)
	}
	l.injects = map[string]*injector{}
	for _, in := range c.Inject {
		ij, err := l.newInjector(in)
		if err != nil {
			return nil, err
		}
		if l.injects[in.Name] != nil {
			return nil, fmt.Errorf("egress lease: inject %q is listed twice", in.Name)
		}
		l.injects[in.Name] = ij
	}

	switch {
	case c.Listen != "":
		ln, err := net.Listen("tcp", c.Listen)
		if err != nil {
			return nil, fmt.Errorf("egress lease: cannot listen on %s: %v", c.Listen, err)
		}
		l.listenAddr = ln.Addr().String()
		l.addListener(ln)
	case c.SocketDir != "":
		// Any port will do: the listener lives in the sandbox's own
		// network namespace, where nothing else is bound.
		l.listenAddr = "127.0.0.1:" + strconv.Itoa(l.proxyPort())
		if err := l.listenHandOver(); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("egress lease: set SocketDir (bridge) or Listen (direct)")
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil, errProxyClosed
	}
	p.leases[l] = struct{}{}
	p.mu.Unlock()
	return l, nil
}

// MaxLocalPorts bounds the local-service ports of one lease: the bridge
// passes two listeners per port (IPv4 and IPv6) in one message, and a
// message carries at most 253 descriptors.
const MaxLocalPorts = 100

// LocalPorts are the host loopback ports the local-service entries of an
// allowlist name, sorted and without repeats.
func LocalPorts(allow []Rule) []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range allow {
		for _, p := range r.Pattern.Ports() {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Ints(out)
	return out
}

// proxyPort picks the proxy's port in the namespace: any free one, and
// never a local-service port, which the bridge binds.
func (l *Lease) proxyPort() int {
	for {
		p := 20000 + rand.IntN(40000)
		if !slices.Contains(l.localPorts, p) {
			return p
		}
	}
}

// LeasedLocalPorts are the lease's local-service ports.
func (l *Lease) LeasedLocalPorts() []int { return append([]int(nil), l.localPorts...) }

// SocketPath is the Unix socket the bridge hands its listener to; "" for
// a lease that listens itself. The sandbox must be able to reach it.
func (l *Lease) SocketPath() string { return l.sockPath }

// ListenAddr is the proxy address the step uses: inside the sandbox's
// namespace for a bridged lease, on the host's loopback otherwise.
func (l *Lease) ListenAddr() string { return l.listenAddr }

// ProxyURL is the value of the step's proxy variables.
func (l *Lease) ProxyURL() string { return "http://" + l.listenAddr }

// Ready is closed once the lease serves a listener (for a bridged lease:
// after the bridge's hand-over succeeded).
func (l *Lease) Ready() <-chan struct{} { return l.handed }

// HandedOver reports whether the lease has a listener in service. When
// the step's process has ended and this is false, the bridge failed
// (reason egress.bridge_failed) and the step never ran.
func (l *Lease) HandedOver() bool {
	select {
	case <-l.handed:
		return true
	default:
		return false
	}
}

// Env is what the step's environment gets: the proxy variables, NO_PROXY,
// NODE_USE_ENV_PROXY and, per inject, the local base URL and the
// placeholder key. No value in it is secret.
func (l *Lease) Env() []string {
	u := l.ProxyURL()
	env := []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u,
		"HTTP_PROXY=" + u, "http_proxy=" + u,
		"ALL_PROXY=" + u, "all_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		"NODE_USE_ENV_PROXY=1",
	}
	for _, in := range l.c.Inject {
		if in.BaseURLEnv != "" {
			env = append(env, in.BaseURLEnv+"="+l.InjectURL(in.Name))
		}
		if in.KeyEnv != "" {
			env = append(env, in.KeyEnv+"="+Placeholder)
		}
	}
	return env
}

// InjectURL is the lease-local base URL of the named inject.
func (l *Lease) InjectURL(name string) string {
	return "http://" + l.listenAddr + injectPrefix + name + "/" + l.injectToken
}

// BridgeArgv is the argv prefix that runs the step through the bridge
// inside the sandbox (kusaw-bridge beside kusawBinary when it is there);
// append the step's own argv. Its first element is the program to mount.
func (l *Lease) BridgeArgv(kusawBinary string) []string {
	return bridge.Argv(kusawBinary, l.sockPath, l.listenAddr, l.localPorts)
}

func (l *Lease) policy() Policy {
	return Policy{Allow: l.c.Allow, AllowRanges: l.c.AllowRanges, PolicyKey: l.c.PolicyKey, RangesKey: l.c.RangesKey, Audit: l.c.Audit, Upstream: l.c.Upstream}
}

// Allowlist returns the lease's rules (for doctor).
func (l *Lease) Allowlist() []Rule { return append([]Rule(nil), l.c.Allow...) }

func (l *Lease) addListener(ln net.Listener) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ln.Close()
		return false
	}
	ln = newLimitListener(ln, l.c.MaxConns)
	l.listeners = append(l.listeners, ln)
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		l.srv.Serve(httpframe.Listener(ln))
	}()
	l.handOnce.Do(func() { close(l.handed) })
	return true
}

// enter registers a running handler; false once the lease is closed.
func (l *Lease) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	return true
}

func (l *Lease) track(c io.Closer) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	l.wg.Add(1) // Close waits until the conn is closed and reported
	return true
}

func (l *Lease) untrack(c io.Closer) {
	l.mu.Lock()
	_, ok := l.conns[c]
	delete(l.conns, c)
	l.mu.Unlock()
	if ok {
		l.wg.Done()
	}
}

// Close stops the lease: its listeners, the hand-over socket, every open
// connection. Connections still open are reported (reason lease.closed)
// before the summary is made. Close may be called more than once.
func (l *Lease) Close() Summary {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.wg.Wait()
		return l.finish()
	}
	l.closed = true
	close(l.quit)
	conns := make([]io.Closer, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()

	if l.unixLn != nil {
		l.unixLn.Close()
		os.Remove(l.sockPath)
	}
	l.srv.Close()
	l.mu.Lock()
	locals := l.localLns
	l.mu.Unlock()
	for _, ln := range locals {
		ln.Close()
	}
	// Mark every upstream first: closing a client ends its tunnel, which
	// reports at once.
	for _, c := range conns {
		if mc, ok := c.(*meteredConn); ok {
			mc.end(Allow, ReasonLeaseClosed, "")
		}
	}
	for _, c := range conns {
		c.Close()
	}
	l.wg.Wait()
	// Conns registered between the snapshot and the wait are closed by
	// their own handlers, which have now returned.
	for _, ij := range l.injects {
		ij.tr.CloseIdleConnections()
	}
	l.p.mu.Lock()
	delete(l.p.leases, l)
	l.p.mu.Unlock()
	return l.finish()
}

func (l *Lease) finish() Summary {
	l.recMu.Lock()
	defer l.recMu.Unlock()
	if l.done {
		return l.summary
	}
	l.done = true
	s := Summary{Lease: l.c.ID, Refusals: l.refusals, Decisions: l.decisions}
	for _, h := range l.hosts {
		s.Hosts = append(s.Hosts, *h)
		s.BytesUp += h.BytesUp
		s.BytesDown += h.BytesDown
	}
	sort.Slice(s.Hosts, func(i, j int) bool { return s.Hosts[i].Host < s.Hosts[j].Host })
	l.summary = s
	return s
}

// record counts a decision and hands it to the observer.
func (l *Lease) record(d Decision) {
	d.Lease = l.c.ID
	if d.Time.IsZero() {
		d.Time = time.Now()
	}
	l.recMu.Lock()
	defer l.recMu.Unlock()
	if l.done {
		return
	}
	l.decisions++
	h := l.hosts[d.Host]
	if h == nil {
		h = &HostSummary{Host: d.Host}
		l.hosts[d.Host] = h
	}
	if d.Blocked() {
		h.Refusals++
		l.refusals++
	}
	if d.Decision == Allow || d.Decision == Close {
		h.Connections++
	}
	h.BytesUp += d.BytesUp
	h.BytesDown += d.BytesDown
	if l.c.Observer != nil {
		l.c.Observer.Decision(d)
	}
}

// budget counts bytes sent upstream per host and in total.
type budget struct {
	perHost, total int64
	mu             sync.Mutex
	used           map[string]int64
	usedTotal      int64
}

// take admits up to n bytes to host and says which limit stopped the
// rest, if any.
func (b *budget) take(host string, n int) (int, string) {
	if b.perHost == 0 && b.total == 0 {
		return n, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	allow, why := int64(n), ""
	if b.perHost > 0 {
		if rem := b.perHost - b.used[host]; rem < allow {
			allow, why = max(rem, 0), ReasonBudgetHost
		}
	}
	if b.total > 0 {
		if rem := b.total - b.usedTotal; rem < allow {
			allow, why = max(rem, 0), ReasonBudgetTotal
		}
	}
	b.used[host] += allow
	b.usedTotal += allow
	return int(allow), why
}

// exhausted says whether a new connection to host must be refused.
func (b *budget) exhausted(host string) string {
	if b.perHost == 0 && b.total == 0 {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.perHost > 0 && b.used[host] >= b.perHost {
		return ReasonBudgetHost
	}
	if b.total > 0 && b.usedTotal >= b.total {
		return ReasonBudgetTotal
	}
	return ""
}

func (l *Lease) budgetLine(host string, why string) string {
	if why == ReasonBudgetTotal {
		return fmt.Sprintf("kusaw: the egress budget of this attempt (%d bytes sent) is used up; raise %s.total", l.c.Budgets.Total, l.c.BudgetKey)
	}
	return fmt.Sprintf("kusaw: the egress budget for %s (%d bytes sent) is used up; raise %s.per_host", host, l.c.Budgets.PerHost, l.c.BudgetKey)
}

func validUpstream(raw string) (*url.URL, string, int, error) {
	// validate refuses the same URLs with the same words.
	if err := config.CheckInjectUpstream(raw); err != nil {
		return nil, "", 0, err
	}
	u, _ := url.Parse(raw)
	host, _ := config.NormalizeHostName(u.Hostname())
	port := 443
	if ps := u.Port(); ps != "" {
		port, _ = strconv.Atoi(ps)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, host, port, nil
}
