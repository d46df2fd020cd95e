package egress

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/kusaw/kusaw/config"
	"golang.org/x/net/publicsuffix"
)

// Policy is what the proxy decides by: an attempt's allowlist and ranges,
// the keys its refusals name, and whether unlisted hosts are only logged
// (network: audit). A lease holds one; kusaw egress check builds one.
type Policy struct {
	Allow       []Rule
	AllowRanges []netip.Prefix
	PolicyKey   string // default sandbox.egress.allow
	RangesKey   string // default sandbox.egress.allow_ranges
	Audit       bool
	// Upstream is the corporate proxy allowed hosts are reached through;
	// a host it carries is not resolved by kusaw (the upstream resolves).
	Upstream *Upstream
}

func (pol *Policy) defaults() {
	if pol.PolicyKey == "" {
		pol.PolicyKey = "sandbox.egress.allow"
	}
	if pol.RangesKey == "" {
		pol.RangesKey = "sandbox.egress.allow_ranges"
	}
}

// Verdict is the proxy's decision on one destination, as plain data: the
// proxy acts on it, kusaw egress check prints it.
type Verdict struct {
	Host    string `json:"host"` // normalised; the client's text, sanitised, when invalid
	Port    int    `json:"port"`
	Allowed bool   `json:"allowed"`
	// Rule is the entry that admitted the host ("" when none did), with
	// its origin (factory, step:ID, provider:NAME).
	Rule   string `json:"rule,omitempty"`
	Origin string `json:"origin,omitempty"`
	// Local is the host's loopback admitted by a local-service entry:
	// dialled without DNS and without the address guard.
	Local bool `json:"local,omitempty"`
	// Addrs are the resolved addresses, in dial order.
	Addrs []netip.Addr `json:"addrs,omitempty"`
	// Status, Reason and Line describe a refusal (403) or failure (502):
	// Line is what the step reads, Fix the one change that would admit
	// the host ("" when nothing may).
	Status int    `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	Line   string `json:"line,omitempty"`
	Fix    string `json:"fix,omitempty"`
	// WouldRefuse is set in audit mode for a host the allowlist lacks: it
	// is admitted, and Reason, Line and Fix say what allowlist would do.
	WouldRefuse bool `json:"would_refuse,omitempty"`
	// Upstream is the upstream proxy the connection goes through ("":
	// dialled directly). Its credentials are never part of it.
	Upstream string `json:"upstream_proxy,omitempty"`
	// Notes are what happens after admission (SNI, plain HTTP).
	Notes []string `json:"notes,omitempty"`
}

func (v Verdict) refused(status int, reason, line, fix string) Verdict {
	v.Allowed, v.Status, v.Reason, v.Line, v.Fix = false, status, reason, line, fix
	return v
}

// decideName applies the name rules: a valid name that is no IP literal,
// no metadata service and no public suffix, that an entry admits on this
// port (or the host's loopback that a local-service entry admits). It
// says nothing yet about addresses. skipRule admits any valid name (an
// inject upstream: the factory's own configuration).
func decideName(pol Policy, rawHost string, port, defPort int, skipRule bool) Verdict {
	pol.defaults()
	v := Verdict{Host: rawHost, Port: port, Allowed: true}
	where := func() string { return hostPort(v.Host, port) }
	if lh, ok := config.LoopbackHost(rawHost); ok {
		v.Host = lh
		if skipRule {
			v.Local = true
			return v
		}
		for _, r := range pol.Allow {
			if r.Pattern.Local && r.Pattern.Matches(lh, port, defPort) {
				v.Rule, v.Origin, v.Local = r.Pattern.String(), r.Origin, true
				return v
			}
		}
		entry := "localhost:" + fmt.Sprint(port)
		return v.refused(403, ReasonLocalPort, fmt.Sprintf("kusaw: %s is the host's loopback, and port %d is not a local service of this step; add %s to %s", where(), port, entry, pol.PolicyKey),
			fmt.Sprintf("add %s to %s", entry, pol.PolicyKey))
	}
	host, err := config.NormalizeHostName(rawHost)
	if err != nil {
		v.Host = sanitize(rawHost)
		if strings.Contains(err.Error(), "IP address") {
			return v.refused(403, ReasonIPLiteral, fmt.Sprintf("kusaw: %s is an IP address; only host names can be allowed (add a name to %s)", where(), pol.PolicyKey),
				"connect by the host's name (TLS needs it for SNI) and add that name to "+pol.PolicyKey)
		}
		return v.refused(403, ReasonBadHost, fmt.Sprintf("kusaw: %q is not a valid host name: %v", v.Host, err), "")
	}
	v.Host = host
	if config.IsMetadataName(host) {
		return v.refused(403, ReasonMetadata, fmt.Sprintf("kusaw: %s is a cloud metadata service and is never allowed", where()), "")
	}
	if ps, icann := publicsuffix.PublicSuffix(host); icann && ps == host {
		return v.refused(403, ReasonPublicSuffix, fmt.Sprintf("kusaw: %s is a public suffix (a registry, not a site) and cannot be allowed", where()), "")
	}
	if skipRule {
		return v
	}
	for _, r := range pol.Allow {
		if !r.Pattern.Local && r.Pattern.Matches(host, port, defPort) {
			v.Rule, v.Origin = r.Pattern.String(), r.Origin
			return v
		}
	}
	// Not admitted: say whether an entry names the host on another port.
	reason, line := ReasonNotAllowed, fmt.Sprintf("kusaw: %s is not allowed; add it to %s", where(), pol.PolicyKey)
	entry := host
	if port != defPort {
		entry = where()
	}
	for _, r := range pol.Allow {
		if !r.Pattern.Local && r.Pattern.MatchesName(host) {
			reason = ReasonPortNotAllowed
			line = fmt.Sprintf("kusaw: %s is not allowed: %s admits %s only; add %s to %s", where(), r.Pattern, r.Pattern.PortsString(defPort), entry, pol.PolicyKey)
			break
		}
	}
	fix := fmt.Sprintf("add %s to %s", entry, pol.PolicyKey)
	if pol.Audit {
		w := v.refused(403, reason, line, fix)
		w.Allowed, w.Status, w.WouldRefuse = true, 0, true
		return w
	}
	return v.refused(403, reason, line, fix)
}

// decideAddrs runs the address guard on a name's answers: every address
// must be dialable, so that whichever is dialled was checked.
func decideAddrs(pol Policy, v Verdict, addrs []netip.Addr) Verdict {
	pol.defaults()
	v.Addrs = addrs
	for _, a := range addrs {
		what := checkAddr(a, pol.AllowRanges)
		if what == "" {
			continue
		}
		reason, fix := ReasonAddress, fmt.Sprintf("if %s is yours, add %s to %s", a.Unmap(), rangeFor(a), pol.RangesKey)
		if neverRange(a) {
			v.WouldRefuse = false
			return v.refused(403, reason, fmt.Sprintf("kusaw: %s resolves to %s, %s, which is never allowed", hostPort(v.Host, v.Port), a.Unmap(), what), "")
		}
		v.WouldRefuse = false
		return v.refused(403, reason, fmt.Sprintf("kusaw: %s resolves to %s, %s; if that range is yours add it to %s", hostPort(v.Host, v.Port), a.Unmap(), what, pol.RangesKey), fix)
	}
	return v
}

// rangeFor suggests the narrowest usual range for an address.
func rangeFor(a netip.Addr) string {
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 128
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// neverRange reports whether a falls in a block allow_ranges cannot open.
func neverRange(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, r := range refusedRanges {
		if r.prefix.Contains(a) {
			return r.never
		}
	}
	return false
}

// decide is the one decision the proxy makes on a destination, names
// first, then (unless it is a local service) the addresses the resolver
// gives. Budgets are checked by the lease afterwards: they are state, not
// policy.
func (p *Proxy) decide(ctx context.Context, pol Policy, rawHost string, port, defPort int, skipRule bool) Verdict {
	v := decideName(pol, rawHost, port, defPort, skipRule)
	if !v.Allowed {
		return v
	}
	if v.Local {
		v.Addrs = loopbackAddrs(v.Host)
		return v
	}
	if up := pol.Upstream; up != nil && !up.bypass(v.Host) {
		v.Upstream = up.URL
		if !v.WouldRefuse {
			return v // an entry names it: the upstream resolves it
		}
		// Audit mode: no entry vouches for the name, so the address guard
		// needs its addresses. kusaw resolves and checks them, and the
		// upstream is asked for the checked address (dialUpstream), never
		// the name, which it could resolve elsewhere.
		addrs, err := p.lookup(ctx, v.Host)
		if err != nil || len(addrs) == 0 {
			msg := "no address"
			if err != nil {
				msg = lookupMsg(err)
			}
			v.WouldRefuse = false
			return v.refused(502, ReasonResolve, fmt.Sprintf("kusaw: cannot resolve %s: %s; audit mode checks the address of a host the allowlist lacks before the upstream proxy is asked", v.Host, msg),
				fmt.Sprintf("add %s to %s, or set sandbox.egress.resolver to a DNS server that knows it", v.Host, pol.PolicyKey))
		}
		return decideAddrs(pol, v, addrs)
	}
	addrs, err := p.lookup(ctx, v.Host)
	if err != nil || len(addrs) == 0 {
		msg := "no address"
		if err != nil {
			msg = lookupMsg(err)
		}
		v.WouldRefuse = false
		return v.refused(502, ReasonResolve, fmt.Sprintf("kusaw: cannot resolve %s: %s", v.Host, msg), "check the name, or set sandbox.egress.resolver to the DNS server that knows it")
	}
	return decideAddrs(pol, v, addrs)
}

// loopbackAddrs are the host addresses a local service is dialled on:
// localhost tries IPv4 first, a literal only itself. No DNS is asked, so
// a resolver cannot point localhost elsewhere.
func loopbackAddrs(host string) []netip.Addr {
	switch host {
	case "127.0.0.1":
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	case "::1":
		return []netip.Addr{netip.IPv6Loopback()}
	}
	return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
}

// Check is kusaw egress check: the decision the proxy would make on a
// CONNECT to host:port (port 0: 443) under pol, resolving as the proxy
// does. Budgets are not part of it.
func (p *Proxy) Check(ctx context.Context, pol Policy, host string, port int) Verdict {
	if port == 0 {
		port = 443
	}
	v := p.decide(ctx, pol, host, port, 443, false)
	if v.Allowed {
		if v.Local {
			v.Notes = append(v.Notes, fmt.Sprintf("a local service: the step reaches the host's loopback port %d through the proxy, and on Linux directly on its own localhost:%d", port, port))
		} else {
			v.Notes = append(v.Notes, fmt.Sprintf("a CONNECT tunnel must start with a TLS ClientHello naming %s (SNI); plain HTTP goes only to port 80", v.Host))
		}
		if v.Upstream != "" {
			v.Notes = append(v.Notes, fmt.Sprintf("reached through upstream_proxy %s with CONNECT; the upstream resolves the name", v.Upstream))
		} else if pol.Upstream != nil && !v.Local {
			v.Notes = append(v.Notes, "dialled directly: upstream_no_proxy lists it")
		}
	}
	return v
}
