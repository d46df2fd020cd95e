package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseHostPatternAccepts(t *testing.T) {
	cases := []struct {
		in   string
		want HostPattern
		str  string
	}{
		{"registry.npmjs.org", HostPattern{Name: "registry.npmjs.org"}, "registry.npmjs.org"},
		{"Registry.NPMJS.org.", HostPattern{Name: "registry.npmjs.org"}, "registry.npmjs.org"},
		{"  api.example.com  ", HostPattern{Name: "api.example.com"}, "api.example.com"},
		{"*.github.com", HostPattern{Name: "github.com", Wildcard: true}, "*.github.com"},
		{"*.GitHub.com.", HostPattern{Name: "github.com", Wildcard: true}, "*.github.com"},
		{"localhost:5432", HostPattern{Name: "localhost", Port: 5432, Local: true}, "localhost:5432"},
		{"localhost", HostPattern{Name: "localhost", Local: true}, "localhost"},
		{"LocalHost.:5000-5010", HostPattern{Name: "localhost", Port: 5000, PortMax: 5010, Local: true}, "localhost:5000-5010"},
		{"127.0.0.1:6379", HostPattern{Name: "127.0.0.1", Port: 6379, Local: true}, "127.0.0.1:6379"},
		{"[::1]:8443", HostPattern{Name: "::1", Port: 8443, Local: true}, "[::1]:8443"},
		{"[::1]:7000-7001", HostPattern{Name: "::1", Port: 7000, PortMax: 7001, Local: true}, "[::1]:7000-7001"},
		{"*.localhost", HostPattern{Name: "localhost", Wildcard: true}, "*.localhost"},
		{"api.example.com:8443", HostPattern{Name: "api.example.com", Port: 8443}, "api.example.com:8443"},
		{"*.example.co.uk", HostPattern{Name: "example.co.uk", Wildcard: true}, "*.example.co.uk"},
		{"*.me.github.io", HostPattern{Name: "me.github.io", Wildcard: true}, "*.me.github.io"},
		{"bücher.example", HostPattern{Name: "xn--bcher-kva.example"}, "xn--bcher-kva.example"},
		{"BÜCHER.example", HostPattern{Name: "xn--bcher-kva.example"}, "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", HostPattern{Name: "xn--bcher-kva.example"}, "xn--bcher-kva.example"},
		{"host-1.example.com:1", HostPattern{Name: "host-1.example.com", Port: 1}, "host-1.example.com:1"},
		{"a.example.com:65535", HostPattern{Name: "a.example.com", Port: 65535}, "a.example.com:65535"},
		{"intranet", HostPattern{Name: "intranet"}, "intranet"},
		{"1password.com", HostPattern{Name: "1password.com"}, "1password.com"},
		{"allowed.test", HostPattern{Name: "allowed.test"}, "allowed.test"},
		{"*.allowed.test", HostPattern{Name: "allowed.test", Wildcard: true}, "*.allowed.test"},
	}
	for _, c := range cases {
		got, err := ParseHostPattern(c.in)
		if err != nil {
			t.Errorf("ParseHostPattern(%q): unexpected error %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseHostPattern(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if got.String() != c.str {
			t.Errorf("ParseHostPattern(%q).String() = %q, want %q", c.in, got.String(), c.str)
		}
		// The normalised form parses to itself.
		again, err := ParseHostPattern(got.String())
		if err != nil || again != got {
			t.Errorf("round trip of %q: %+v, %v", got.String(), again, err)
		}
	}
}

func TestParseHostPatternRefuses(t *testing.T) {
	cases := []struct{ in, msg string }{
		{"", "empty"},
		{"   ", "empty"},
		{"*", "bare wildcard"},
		{"*.", "bare wildcard"},
		{"*:443", "bare wildcard"},
		{"*.com", "public suffix"},
		{"*.co.uk", "public suffix"},
		{"*.github.io", "public suffix"},
		{"*.test", "public suffix"},
		{"*.internal", "public suffix"},
		{"*.google.internal", "metadata"},
		{"*.azure.com", "metadata"},
		{"*.ec2.internal", "metadata"},
		{"metadata.google.internal", "metadata"},
		{"Metadata.Google.Internal.", "metadata"},
		{"metadata", "metadata"},
		{"metadata:80", "metadata"},
		{"instance-data", "metadata"},
		{"metadata.azure.com", "metadata"},
		{"127.0.0.1", "needs a port"},
		{"127.0.0.1:80-70", "backwards"},
		{"localhost:1000-2000", "at most"},
		{"localhost:5000-", "empty port"},
		{"example.com:5000-5001", "only for local services"},
		{"127.0.0.2:80", "IP addresses"},
		{"[::1]", "needs a port"},
		{"[::2]:80", "IP addresses"},
		{"169.254.169.254", "IP addresses"},
		{"2130706433", "IP addresses"},
		{"0x7f000001", "IP addresses"},
		{"0x7f.1", "IP addresses"},
		{"0177.0.0.1", "IP addresses"},
		{"127.1", "IP addresses"},
		{"10.0.0.1.", "IP addresses"},
		{"::1", "IP addresses"},
		{"fe80::1", "IP addresses"},
		{"::ffff:127.0.0.1", "IP addresses"},
		{"*.0.0.127", "IP addresses"},
		{"１２７.０.０.１", "IP addresses"}, // full-width digits map to ASCII
		{"a..b", "empty label"},
		{".example.com", "empty label"},
		{"example.com..", "empty label"},
		{"*..example.com", "empty label"},
		{"a.*.example.com", "'*'"},
		{"*example.com", "'*'"},
		{"**.example.com", "'*'"},
		{"example.com:", "empty port"},
		{"example.com:0", "out of range"},
		{"example.com:65536", "out of range"},
		{"example.com:99999999999999999999", "out of range"},
		{"example.com:-1", "empty port"},
		{"example.com:+80", "not a number"},
		{"example.com:http", "not a number"},
		{"https://example.com", "not a URL"},
		{"example.com/path", "not a URL"},
		{"user@example.com", "not a URL"},
		{"exa mple.com", "not a URL"},
		{"-bad.example.com", "hyphen"},
		{"bad-.example.com", "hyphen"},
		{"exa!mple.com", "cannot be in a host name"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{strings.Repeat("a.", 130) + "com", "longer than 253"},
		{"xn--zz.example", "punycode"},
	}
	for _, c := range cases {
		got, err := ParseHostPattern(c.in)
		if err == nil {
			t.Errorf("ParseHostPattern(%q) = %+v, want an error about %q", c.in, got, c.msg)
			continue
		}
		var he *HostPatternError
		if !errors.As(err, &he) {
			t.Errorf("ParseHostPattern(%q): error %T is not *HostPatternError", c.in, err)
			continue
		}
		if he.Entry != c.in || he.Fix == "" {
			t.Errorf("ParseHostPattern(%q): entry %q fix %q", c.in, he.Entry, he.Fix)
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseHostPattern(%q): error %q does not mention %q", c.in, err, c.msg)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseHostPattern(%q): error has more than one line: %q", c.in, err)
		}
	}
}

func TestHostPatternMatches(t *testing.T) {
	mustParse := func(s string) HostPattern {
		h, err := ParseHostPattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	cases := []struct {
		pattern string
		host    string
		port    int
		def     int
		want    bool
	}{
		{"example.com", "example.com", 443, 443, true},
		{"example.com", "EXAMPLE.com.", 443, 443, true},
		{"example.com", "example.com", 80, 80, true},
		{"example.com", "example.com", 80, 443, false},
		{"example.com", "example.com", 8443, 443, false},
		{"example.com", "a.example.com", 443, 443, false},
		{"example.com", "badexample.com", 443, 443, false},
		{"example.com", "example.com.evil", 443, 443, false},
		{"example.com:8443", "example.com", 8443, 443, true},
		{"example.com:8443", "example.com", 443, 443, false},
		{"*.example.com", "a.example.com", 443, 443, true},
		{"*.example.com", "a.b.example.com", 443, 443, true},
		{"*.example.com", "A.Example.COM.", 443, 443, true},
		{"*.example.com", "example.com", 443, 443, false},
		{"*.example.com", "badexample.com", 443, 443, false},
		{"*.example.com", "a.badexample.com", 443, 443, false},
		{"*.example.com", ".example.com", 443, 443, false},
		{"*.example.com:80", "a.example.com", 443, 443, false},
		{"*.example.com:80", "a.example.com", 80, 443, true},
		{"localhost:5432", "localhost", 5432, 443, true},
		{"localhost:5432", "localhost", 5433, 443, false},
		{"*.localhost", "app.localhost", 80, 80, true},
		{"*.localhost", "localhost", 80, 80, false},
		{"localhost:5432", "127.0.0.1", 5432, 443, true},
		{"127.0.0.1:5432", "localhost", 5432, 443, true},
		{"[::1]:5432", "::1", 5432, 443, true},
		{"localhost:5000-5010", "localhost", 5000, 443, true},
		{"localhost:5000-5010", "localhost", 5010, 443, true},
		{"localhost:5000-5010", "localhost", 5011, 443, false},
		{"localhost:5000-5010", "localhost", 4999, 443, false},
		{"localhost:5432", "db.localhost", 5432, 443, false},
	}
	for _, c := range cases {
		got := mustParse(c.pattern).Matches(c.host, c.port, c.def)
		if got != c.want {
			t.Errorf("%q.Matches(%q, %d, %d) = %v, want %v", c.pattern, c.host, c.port, c.def, got, c.want)
		}
	}
}

func TestNormalizeHostName(t *testing.T) {
	good := map[string]string{
		"Example.COM.": "example.com",
		"bücher.de":    "xn--bcher-kva.de",
		"_acme.x.org":  "_acme.x.org",
	}
	for in, want := range good {
		got, err := NormalizeHostName(in)
		if err != nil || got != want {
			t.Errorf("NormalizeHostName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "127.0.0.1", "[::1]", "::1", "2130706433", "a..b", "a b", "x.0x7f"} {
		if got, err := NormalizeHostName(in); err == nil {
			t.Errorf("NormalizeHostName(%q) = %q, want an error", in, got)
		}
	}
}

func FuzzParseHostPattern(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:8443", "localhost", "127.0.0.1", "[::1]:1", "bücher.de", "*.co.uk", "a..b", "0x7f.1", "metadata"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHostPattern(s)
		if err != nil {
			var he *HostPatternError
			if !errors.As(err, &he) {
				t.Fatalf("error %T is not *HostPatternError", err)
			}
			if strings.ContainsAny(he.Msg, "\n\r") {
				t.Fatalf("multi-line message %q", he.Msg)
			}
			return
		}
		// An accepted pattern is normalised, never an IP, never metadata,
		// and parses back to itself.
		if h.Name == "" || strings.HasSuffix(h.Name, ".") || strings.ToLower(h.Name) != h.Name {
			t.Fatalf("not normalised: %+v", h)
		}
		if (looksLikeIP(h.Name) && !h.Local) || IsMetadataName(h.Name) {
			t.Fatalf("accepted %q as %+v", s, h)
		}
		again, err := ParseHostPattern(h.String())
		if err != nil || again != h {
			t.Fatalf("round trip %q -> %+v -> %q -> %+v, %v", s, h, h.String(), again, err)
		}
		if h.Wildcard {
			if h.Matches(h.Name, 443, 443) {
				t.Fatalf("wildcard %+v matches its bare suffix", h)
			}
			for _, m := range metadataNames {
				if h.Matches(m, h.Port, h.Port) {
					t.Fatalf("wildcard %+v covers %s", h, m)
				}
			}
		}
	})
}
