package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Proxy is the egress proxy of one process. It owns the DNS resolver and
// its leases; each lease has its own listener and policy.
type Proxy struct {
	o   Options
	res *net.Resolver

	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool

	cacheMu sync.Mutex
	cache   map[string]cacheEntry

	// dialCheck, when set by tests, vets every address before connect.
	dialCheck func(netip.Addr) error
	// plainTunnelPort is the CONNECT port whose tunnels may carry plain
	// HTTP: 80, changed only by tests that cannot bind port 80.
	plainTunnelPort int
}

// NewProxy checks the options and returns a proxy with no lease yet.
func NewProxy(o Options) (*Proxy, error) {
	o.defaults()
	p := &Proxy{o: o, leases: map[*Lease]struct{}{}, plainTunnelPort: 80}
	if o.Resolver == "" {
		p.res = &net.Resolver{PreferGo: true}
	} else {
		ap, err := netip.ParseAddrPort(o.Resolver)
		if err != nil {
			return nil, fmt.Errorf("egress resolver %q is not an IP:port (for example 127.0.0.53:53)", o.Resolver)
		}
		server := ap.String()
		d := net.Dialer{Timeout: o.ResolveTimeout}
		p.res = &net.Resolver{
			PreferGo: true,
			// Every query goes to the configured server, whatever
			// resolv.conf says.
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, server)
			},
		}
	}
	return p, nil
}

// Close closes every lease.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ls := make([]*Lease, 0, len(p.leases))
	for l := range p.leases {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	return nil
}

var errProxyClosed = errors.New("egress proxy is closed")

type cacheEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

const maxCacheEntries = 4096

// lookup resolves a name with the proxy's resolver. IPv4 answers come
// first: sandboxes and CI hosts often have no IPv6 route.
func (p *Proxy) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if p.o.DNSCacheTTL > 0 {
		p.cacheMu.Lock()
		e, ok := p.cache[host]
		p.cacheMu.Unlock()
		if ok && time.Now().Before(e.expires) {
			return e.addrs, nil
		}
	}
	addrs, err := p.resolve(ctx, host)
	if err == nil && len(addrs) > 0 && p.o.DNSCacheTTL > 0 {
		p.cacheMu.Lock()
		if p.cache == nil || len(p.cache) >= maxCacheEntries {
			p.cache = map[string]cacheEntry{}
		}
		p.cache[host] = cacheEntry{addrs, time.Now().Add(p.o.DNSCacheTTL)}
		p.cacheMu.Unlock()
	}
	return addrs, err
}

func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.ResolveTimeout)
	defer cancel()
	addrs, err := p.res.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.Unmap().Is4() {
			out = append(out, a.Unmap())
		}
	}
	for _, a := range addrs {
		if !a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}
