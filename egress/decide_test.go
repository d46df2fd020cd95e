package egress

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

// Every rule of the proxy, as egress check reports it: the same decide the
// proxy runs, with the stub resolver standing in for DNS.
func TestCheckEveryRule(t *testing.T) {
	dns := newStubDNS(t)
	p, err := NewProxy(Options{Resolver: dns.addr})
	if err != nil {
		t.Fatal(err)
	}
	dns.set("api.example.com", "93.184.215.14")
	dns.set("svc.example.com", "93.184.215.15")
	dns.set("db.test", "127.0.0.1")
	dns.set("ok.test", "127.0.0.1")
	dns.set("corp.test", "10.1.2.3")
	dns.set("meta.test", "169.254.169.254")
	dns.set("x.open.test", "93.184.215.16")
	allow := append(rules(t, "api.example.com", "svc.example.com:8443", "db.test", "ok.test", "corp.test", "meta.test", "localhost:5432", "localhost:7000-7002"),
		Rule{Pattern: rules(t, "*.open.test")[0].Pattern, Origin: "step:build"},
		Rule{Pattern: rules(t, "api.anthropic.test")[0].Pattern, Origin: "provider:claude-code"})
	dns.set("api.anthropic.test", "93.184.215.17")
	pol := Policy{Allow: allow, PolicyKey: "steps.build.sandbox.egress.allow", AllowRanges: nil}
	cases := []struct {
		host   string
		port   int
		ok     bool
		reason string
		rule   string
		origin string
		line   string
		fix    string
	}{
		{"api.example.com", 443, true, "", "api.example.com", "factory", "", ""},
		{"x.open.test", 443, true, "", "*.open.test", "step:build", "", ""},
		{"api.anthropic.test", 443, true, "", "api.anthropic.test", "provider:claude-code", "", ""},
		{"localhost", 5432, true, "", "localhost:5432", "factory", "", ""},
		{"127.0.0.1", 7001, true, "", "localhost:7000-7002", "factory", "", ""},
		{"evil.test", 443, false, ReasonNotAllowed, "", "", "kusaw: evil.test:443 is not allowed; add it to steps.build.sandbox.egress.allow", "add evil.test to steps.build.sandbox.egress.allow"},
		{"api.example.com", 8443, false, ReasonPortNotAllowed, "", "", "api.example.com admits port 443 only", "add api.example.com:8443 to steps.build.sandbox.egress.allow"},
		{"svc.example.com", 443, false, ReasonPortNotAllowed, "", "", "svc.example.com:8443 admits port 8443 only", "add svc.example.com to steps.build.sandbox.egress.allow"},
		{"localhost", 6379, false, ReasonLocalPort, "", "", "port 6379 is not a local service", "add localhost:6379 to steps.build.sandbox.egress.allow"},
		{"db.test", 443, false, ReasonAddress, "db.test", "factory", "resolves to 127.0.0.1, a loopback address", "if 127.0.0.1 is yours, add 127.0.0.1/32 to sandbox.egress.allow_ranges"},
		{"corp.test", 443, false, ReasonAddress, "corp.test", "factory", "10.1.2.3, a private address", "add 10.1.2.3/32 to sandbox.egress.allow_ranges"},
		{"meta.test", 443, false, ReasonAddress, "meta.test", "factory", "169.254.169.254, a cloud metadata address, which is never allowed", ""},
		{"metadata.google.internal", 80, false, ReasonMetadata, "", "", "cloud metadata service", ""},
		{"co.uk", 443, false, ReasonPublicSuffix, "", "", "public suffix", ""},
		{"93.184.215.14", 443, false, ReasonIPLiteral, "", "", "is an IP address", "connect by the host's name (TLS needs it for SNI)"},
		{"bad host", 443, false, ReasonBadHost, "", "", "not a valid host name", ""},
	}
	for _, c := range cases {
		v := p.Check(context.Background(), pol, c.host, c.port)
		if v.Allowed != c.ok || v.Reason != c.reason || v.Rule != c.rule || v.Origin != c.origin || !strings.Contains(v.Line, c.line) || !strings.Contains(v.Fix, c.fix) {
			t.Errorf("check %s:%d = %+v\nwant ok=%v reason=%q rule=%q origin=%q line~%q fix~%q", c.host, c.port, v, c.ok, c.reason, c.rule, c.origin, c.line, c.fix)
		}
		if c.ok && len(v.Notes) == 0 {
			t.Errorf("check %s:%d: an allowed verdict says nothing of SNI or local services", c.host, c.port)
		}
		if c.ok && !strings.Contains(c.rule, "localhost") && !strings.Contains(strings.Join(v.Notes, " "), "SNI") {
			t.Errorf("check %s:%d: notes %q lack the SNI requirement", c.host, c.port, v.Notes)
		}
	}
	if dns.count("localhost") != 0 {
		t.Fatal("a local service was looked up in DNS")
	}
	// The address guard still refuses a loopback name with allow_ranges
	// absent; with it the name passes.
	pol.AllowRanges = mustPrefixes(t, "127.0.0.0/8")
	if v := p.Check(context.Background(), pol, "db.test", 443); !v.Allowed {
		t.Fatalf("db.test with allow_ranges: %+v", v)
	}
	// Audit: an unlisted host is admitted as would-refuse; the guard and
	// the metadata names still refuse.
	pol.Audit = true
	if v := p.Check(context.Background(), pol, "evil.test", 443); v.Allowed {
		t.Fatalf("evil.test resolves nowhere, yet: %+v", v)
	}
	dns.set("evil.test", "93.184.215.20")
	if v := p.Check(context.Background(), pol, "evil.test", 443); !v.Allowed || !v.WouldRefuse || v.Reason != ReasonNotAllowed || v.Fix != "add evil.test to steps.build.sandbox.egress.allow" {
		t.Fatalf("audit evil.test: %+v", v)
	}
	dns.set("sneaky.test", "169.254.169.254")
	if v := p.Check(context.Background(), pol, "sneaky.test", 443); v.Allowed || v.WouldRefuse {
		t.Fatalf("audit must still refuse a metadata address: %+v", v)
	}
	if v := p.Check(context.Background(), pol, "metadata.google.internal", 80); v.Allowed {
		t.Fatalf("audit must still refuse a metadata name: %+v", v)
	}
}

func mustPrefixes(t *testing.T, ss ...string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// Loopback in any spelling is one local service; spellings that some
// resolver or URL parser reads as loopback but that are not the three
// canonical ones stay IP literals and are refused, even on a leased port.
// Audit mode never opens an unlisted loopback port.
func TestLocalServiceSpellings(t *testing.T) {
	dns := newStubDNS(t)
	p, err := NewProxy(Options{Resolver: dns.addr})
	if err != nil {
		t.Fatal(err)
	}
	pol := Policy{Allow: rules(t, "localhost:5432")}
	for host, ok := range map[string]bool{
		"localhost": true, "LOCALHOST.": true, "127.0.0.1": true, "::1": true, "[::1]": true,
		"127.0.0.2": false, "127.1": false, "0177.0.0.1": false, "2130706433": false, "0x7f000001": false,
		"::ffff:127.0.0.1": false, "[::ffff:7f00:1]": false, "localhost.localdomain": false,
	} {
		v := p.Check(context.Background(), pol, host, 5432)
		if v.Allowed != ok || (ok && !v.Local) {
			t.Errorf("%s:5432: %+v, want allowed=%v", host, v, ok)
		}
	}
	pol.Audit = true
	if v := p.Check(context.Background(), pol, "localhost", 6379); v.Allowed || v.Reason != ReasonLocalPort {
		t.Errorf("audit opened an unlisted loopback port: %+v", v)
	}
	if n := dns.count("localhost") + dns.count("localhost.localdomain"); n > 1 {
		t.Errorf("loopback names were looked up %d times", n)
	}
}
