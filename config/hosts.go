package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// HostPattern is one entry of an egress allowlist: a host name or a
// "*.suffix" wildcard, with an optional port.
type HostPattern struct {
	// Name is lower-case ASCII (IDNA), without a trailing dot. For a
	// wildcard it is the suffix without "*.".
	Name string
	// Wildcard matches subdomains of Name only, never Name itself.
	Wildcard bool
	// Port is 0 for the default port: 443 for CONNECT, 80 for plain HTTP.
	Port int
	// PortMax, when set, makes the entry a port range Port-PortMax.
	PortMax int
	// Local marks an entry for the host's loopback (localhost, 127.0.0.1
	// or [::1]): a local service on those ports, reached through the
	// proxy and, on Linux, directly through the bridge.
	Local bool
}

// MaxLocalPorts bounds the ports one local-service range leases: the
// bridge opens a listener for each.
const MaxLocalPorts = 64

// LoopbackHost reports whether a host as a client wrote it names the
// host's loopback (localhost, 127.0.0.1, ::1 in any usual spelling) and
// gives its canonical form.
func LoopbackHost(s string) (string, bool) {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(s, "]"), "["), ".")
	switch {
	case strings.EqualFold(s, "localhost"):
		return "localhost", true
	case s == "127.0.0.1":
		return s, true
	}
	if a, err := netip.ParseAddr(s); err == nil && a == netip.IPv6Loopback() {
		return "::1", true
	}
	return "", false
}

// HostPatternError says why an allowlist entry is refused and how to fix it.
type HostPatternError struct {
	Entry string
	Msg   string
	Fix   string
}

func (e *HostPatternError) Error() string {
	if e.Fix == "" {
		return fmt.Sprintf("host entry %q: %s", e.Entry, e.Msg)
	}
	return fmt.Sprintf("host entry %q: %s (fix: %s)", e.Entry, e.Msg, e.Fix)
}

// metadataNames are cloud instance-metadata services reachable by name.
// They hand out credentials to whoever asks from inside an instance, so no
// allowlist may name them, directly or through a wildcard.
var metadataNames = []string{
	"metadata",
	"metadata.google.internal",
	"metadata.goog",
	"instance-data",
	"instance-data.ec2.internal",
	"metadata.azure.com",
	"metadata.azure.internal",
	"metadata.platformequinix.com",
	"metadata.packet.net",
	"metadata.tencentyun.com",
	"metadata.oraclecloud.com",
}

// IsMetadataName reports whether a normalised host name is a cloud metadata
// service name.
func IsMetadataName(name string) bool {
	for _, m := range metadataNames {
		if name == m {
			return true
		}
	}
	return false
}

// idnaProfile maps a name the way a lookup would (case folding, width
// mapping) and checks the IDNA rules. It does not enforce letters-digits-
// hyphen itself because checkLabels does, with clearer messages.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.StrictDomainName(false),
	idna.VerifyDNSLength(false),
)

// NormalizeHostName turns a host name as a client wrote it (any case,
// Unicode, one trailing dot) into the form HostPattern.Name uses. It refuses
// IP literals in any spelling, empty labels and characters that cannot be in
// a DNS name. The error text is one line and does not contain the fix.
func NormalizeHostName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("empty host name")
	}
	if len(s) > 1024 {
		return "", fmt.Errorf("host name is too long")
	}
	if strings.HasPrefix(s, "[") || strings.Contains(s, ":") {
		return "", errIPLiteral
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", fmt.Errorf("empty host name")
	}
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	var name string
	if ascii {
		name = strings.ToLower(s)
	} else {
		n, err := idnaProfile.ToASCII(s)
		if err != nil {
			return "", fmt.Errorf("not a valid international domain name")
		}
		name = strings.TrimSuffix(n, ".")
	}
	if looksLikeIP(name) {
		return "", errIPLiteral
	}
	if err := checkLabels(name); err != nil {
		return "", err
	}
	if !ascii {
		// A name that maps to its own ASCII form must still be valid
		// punycode in each xn-- label.
		if _, err := idnaProfile.ToUnicode(name); err != nil {
			return "", fmt.Errorf("not a valid international domain name")
		}
	} else if strings.Contains(name, "xn--") {
		if _, err := idnaProfile.ToUnicode(name); err != nil {
			return "", fmt.Errorf("a label starting with xn-- is not valid punycode")
		}
	}
	return name, nil
}

var errIPLiteral = fmt.Errorf("IP addresses are not allowed, only host names")

// looksLikeIP reports whether a lower-case name would be read as an IP
// address by some resolver or URL parser: a literal IPv4/IPv6 address, or a
// name whose last label is a number (decimal, octal or 0x hex), which is how
// "2130706433", "0x7f.1" and "127.1" reach 127.0.0.1.
func looksLikeIP(name string) bool {
	if _, err := netip.ParseAddr(name); err != nil {
		if strings.Contains(name, ":") {
			return true
		}
	} else {
		return true
	}
	last := name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		last = name[i+1:]
	}
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		for _, c := range last[2:] {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func checkLabels(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("host name is longer than 253 characters")
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return fmt.Errorf("host name has an empty label (two dots in a row or a leading dot)")
		}
		if len(l) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				if c == '*' {
					return fmt.Errorf("'*' may only be the whole first label, as in *.example.com")
				}
				return fmt.Errorf("character %q cannot be in a host name", c)
			}
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen", l)
		}
	}
	return nil
}

// ParseHostPattern parses one allowlist entry: "name", "*.suffix", each with
// an optional ":port". It refuses what would widen the allowlist beyond a
// named service: IP literals, bare "*", wildcards at or above a public
// suffix, and cloud metadata names.
func ParseHostPattern(s string) (HostPattern, error) {
	fail := func(msg, fix string) (HostPattern, error) {
		return HostPattern{}, &HostPatternError{Entry: s, Msg: msg, Fix: fix}
	}
	raw := strings.TrimSpace(s)
	if raw == "" {
		return fail("empty entry", "write a host name such as registry.npmjs.org")
	}
	if strings.Contains(raw, "://") || strings.ContainsAny(raw, "/?#@ \t") {
		return fail("an entry is a host name with an optional :port, not a URL", "write only the host, e.g. api.example.com or api.example.com:8443")
	}
	host, ports := raw, ""
	if strings.HasPrefix(raw, "[") {
		end := strings.IndexByte(raw, ']')
		if end < 0 {
			return fail(errIPLiteral.Error(), "name the service by its DNS name; for a private address range use sandbox.egress.allow_ranges with a host name")
		}
		host = raw[:end+1]
		if rest := raw[end+1:]; rest != "" {
			if rest[0] != ':' {
				return fail(errIPLiteral.Error(), "write [::1]:PORT for a local service")
			}
			ports = rest[1:]
			if ports == "" {
				return fail("empty port after ':'", "drop the ':' or write a port from 1 to 65535")
			}
		}
	} else if strings.Count(raw, ":") > 1 {
		return fail(errIPLiteral.Error(), "name the service by its DNS name; for a private address range use sandbox.egress.allow_ranges with a host name")
	} else if i := strings.LastIndexByte(raw, ':'); i >= 0 {
		host, ports = raw[:i], raw[i+1:]
		if ports == "" {
			return fail("empty port after ':'", "drop the ':' or write a port from 1 to 65535")
		}
	}
	port, portMax := 0, 0
	if ports != "" {
		lo, hi, isRange := strings.Cut(ports, "-")
		var msg, fix string
		if port, msg, fix = parseEntryPort(lo); msg != "" {
			return fail(msg, fix)
		}
		if isRange {
			if portMax, msg, fix = parseEntryPort(hi); msg != "" {
				return fail(msg, fix)
			}
			if portMax <= port {
				return fail(fmt.Sprintf("port range %s is empty or backwards", ports), "write the lower port first, as in localhost:5000-5010")
			}
		}
	}
	if lh, ok := LoopbackHost(host); ok {
		if lh != "localhost" && port == 0 {
			return fail("a local service entry needs a port", "write "+host+":PORT, e.g. "+host+":5432")
		}
		if portMax > 0 && portMax-port+1 > MaxLocalPorts {
			return fail(fmt.Sprintf("the range %s leases %d local ports; at most %d", ports, portMax-port+1, MaxLocalPorts), "list only the ports the step uses")
		}
		return HostPattern{Name: lh, Port: port, PortMax: portMax, Local: true}, nil
	}
	if strings.HasPrefix(host, "[") {
		return fail(errIPLiteral.Error(), "name the service by its DNS name; for a private address range use sandbox.egress.allow_ranges with a host name")
	}
	if portMax > 0 {
		return fail("port ranges are only for local services (localhost, 127.0.0.1, [::1])", "list each port of "+host+" as its own entry")
	}
	wild := false
	switch {
	case host == "*" || host == "*.":
		return fail("a bare wildcard would allow every host", "list the hosts, or *.example.com for one domain's subdomains")
	case strings.HasPrefix(host, "*."):
		wild = true
		host = host[2:]
	}
	if host == "" {
		return fail("empty host name", "write a host name such as registry.npmjs.org")
	}
	name, err := NormalizeHostName(host)
	if err != nil {
		if err == errIPLiteral {
			return fail(err.Error(), "name the service by its DNS name; for a private address range use sandbox.egress.allow_ranges with a host name")
		}
		return fail(err.Error(), "write a host name such as registry.npmjs.org or *.example.com")
	}
	if IsMetadataName(name) {
		return fail("cloud metadata services are never reachable from a sandbox", "remove the entry")
	}
	h := HostPattern{Name: name, Wildcard: wild, Port: port}
	if wild {
		if name != "localhost" {
			ps, _ := publicsuffix.PublicSuffix(name)
			if ps == name {
				return fail(fmt.Sprintf("*.%s would cover every site under the public suffix %q", name, ps), "list the sites you need, e.g. *.example."+name)
			}
		}
		for _, m := range metadataNames {
			if (HostPattern{Name: name, Wildcard: true}).Matches(m, 0, 0) {
				return fail(fmt.Sprintf("the wildcard covers the cloud metadata name %s", m), "list the hosts you need one by one")
			}
		}
	}
	return h, nil
}

func parseEntryPort(ps string) (int, string, string) {
	if ps == "" {
		return 0, "empty port", "write a port from 1 to 65535"
	}
	for _, c := range ps {
		if c < '0' || c > '9' {
			return 0, fmt.Sprintf("port %q is not a number", ps), "write a port from 1 to 65535"
		}
	}
	n, err := strconv.Atoi(ps)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Sprintf("port %s is out of range", ps), "write a port from 1 to 65535"
	}
	return n, "", ""
}

// String gives the entry back in its normalised form.
func (h HostPattern) String() string {
	s := h.Name
	if h.Wildcard {
		s = "*." + s
	}
	if s == "::1" {
		s = "[::1]"
	}
	if h.Port != 0 {
		s += ":" + strconv.Itoa(h.Port)
	}
	if h.PortMax != 0 {
		s += "-" + strconv.Itoa(h.PortMax)
	}
	return s
}

// Ports lists the ports of a local-service entry (nil for others and for
// an entry without a port).
func (h HostPattern) Ports() []int {
	if !h.Local || h.Port == 0 {
		return nil
	}
	hi := max(h.PortMax, h.Port)
	out := make([]int, 0, hi-h.Port+1)
	for p := h.Port; p <= hi; p++ {
		out = append(out, p)
	}
	return out
}

// PortsString says which ports the entry admits, for messages.
func (h HostPattern) PortsString(defaultPort int) string {
	switch {
	case h.PortMax != 0:
		return fmt.Sprintf("ports %d-%d", h.Port, h.PortMax)
	case h.Port != 0:
		return fmt.Sprintf("port %d", h.Port)
	}
	return fmt.Sprintf("port %d", defaultPort)
}

// MatchesPort reports whether port is the entry's port (or in its range).
func (h HostPattern) MatchesPort(port, defaultPort int) bool {
	lo := h.Port
	if lo == 0 {
		lo = defaultPort
	}
	return port >= lo && port <= max(h.PortMax, lo)
}

// MatchesName reports whether host is the entry's host, whatever the port.
func (h HostPattern) MatchesName(host string) bool {
	return h.Matches(host, h.Port, h.Port)
}

// IsLocalhost reports whether the pattern names localhost or its
// subdomains, which are answered as loopback without DNS.
func (h HostPattern) IsLocalhost() bool { return h.Name == "localhost" }

// Matches reports whether a host and port are admitted by the pattern.
// host should already be normalised (NormalizeHostName); as a convenience a
// different case and one trailing dot are accepted. defaultPort is the port
// a pattern without one stands for (443 for CONNECT, 80 for plain HTTP).
func (h HostPattern) Matches(host string, port int, defaultPort int) bool {
	if !h.MatchesPort(port, defaultPort) {
		return false
	}
	if h.Local {
		// Every spelling of loopback is the same local service.
		_, ok := LoopbackHost(host)
		return ok
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if !h.Wildcard {
		return host == h.Name
	}
	return len(host) > len(h.Name)+1 && strings.HasSuffix(host, h.Name) && host[len(host)-len(h.Name)-1] == '.'
}
