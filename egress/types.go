package egress

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"time"

	"github.com/kusaw/kusaw/config"
)

// Options configure the one proxy of a process.
type Options struct {
	// Resolver is the IP:port of the DNS server the proxy asks; "" uses
	// the system's configuration.
	Resolver string
	// DialTimeout bounds one TCP connect to an upstream address (10s).
	DialTimeout time.Duration
	// ResolveTimeout bounds one name lookup (5s).
	ResolveTimeout time.Duration
	// IdleTimeout closes a tunnel, upgraded connection or client
	// connection that moved no byte in either direction for this long (5m).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds reading a request's headers and a tunnel's
	// TLS ClientHello (10s).
	HandshakeTimeout time.Duration
	// DNSCacheTTL is how long a successful answer is reused (5s; negative
	// turns the cache off). Every connection still runs the address guard
	// on the answer and dials exactly what it checked, so the cache cannot
	// open anything; it only saves a lookup per connection.
	DNSCacheTTL time.Duration
}

func (o *Options) defaults() {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.ResolveTimeout <= 0 {
		o.ResolveTimeout = 5 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.DNSCacheTTL == 0 {
		o.DNSCacheTTL = 5 * time.Second
	}
}

// Rule is one allowlist entry with where it came from (factory,
// step:<id>, provider:<name>), for doctor and the log.
type Rule struct {
	Pattern config.HostPattern
	Origin  string
}

func (r Rule) String() string {
	if r.Origin == "" {
		return r.Pattern.String()
	}
	return r.Pattern.String() + " (" + r.Origin + ")"
}

// Budgets bound the bytes an attempt sends upstream (counted on the wire:
// request lines, headers, TLS records). 0 means no limit.
type Budgets struct {
	PerHost int64
	Total   int64
}

// Inject holds a provider key outside the sandbox. The step reaches the
// provider through a lease-local base URL with a placeholder key; the
// proxy swaps in the real key and forwards over verified TLS.
type Inject struct {
	Name string // provider name; also the URL path segment
	// Host is the provider's API host; used when Upstream is empty.
	Host string
	// Header carries the key upstream, e.g. x-api-key or Authorization.
	Header string
	// ValuePrefix goes before the key in Header, e.g. "Bearer ".
	ValuePrefix string
	// Key is the real secret. It is never logged, printed or put in the
	// step's environment.
	Key string
	// Upstream is the https base URL requests are forwarded to.
	Upstream string
	// BaseURLEnv and KeyEnv name the step's variables that get the local
	// base URL and the placeholder key.
	BaseURLEnv string
	KeyEnv     string
	// RootCAs, when set, are the CAs the upstream's certificate is checked
	// against (the system's and providers.<name>.ca_file's) instead of
	// the lease's.
	RootCAs *x509.CertPool
	// CAKey is the setting that trusts a private CA for this upstream
	// (providers.<name>.ca_file), named when its certificate is refused.
	CAKey string
}

// String and GoString keep the key out of any printed form.
func (i Inject) String() string {
	return fmt.Sprintf("inject %s: %s -> %s (header %s, key redacted)", i.Name, i.BaseURLEnv, i.upstream(), i.Header)
}

// GoString implements fmt.GoStringer for %#v.
func (i Inject) GoString() string { return i.String() }

func (i Inject) upstream() string {
	if i.Upstream != "" {
		return i.Upstream
	}
	return "https://" + i.Host
}

// Placeholder is the key value the sandbox sees in place of a real one.
const Placeholder = "factory-egress-placeholder"

// LeaseConfig is one attempt's policy on the proxy.
type LeaseConfig struct {
	ID string // names the lease in decisions (the attempt's id)
	// SocketDir holds the lease's hand-over Unix socket (egress.sock).
	// The sandbox must see it (a read-only bind is enough). Its path must
	// be short: Unix socket paths are limited to 107 bytes.
	SocketDir string
	// AwaitPeer makes the hand-over wait for Lease.ExpectPeer and then
	// admit only a process below the one it names (the sandbox's bwrap)
	// or one outside every sandbox. Without it, a process below kusaw
	// itself may hand over.
	AwaitPeer bool
	// Listen, if set (e.g. "127.0.0.1:0"), makes the lease listen there
	// itself instead of waiting for the bridge: macOS, or tests.
	Listen      string
	Allow       []Rule
	AllowRanges []netip.Prefix
	Budgets     Budgets
	Inject      []Inject
	// PolicyKey is the allowlist key a 403 names, e.g.
	// steps.test.sandbox.egress.allow (default sandbox.egress.allow).
	PolicyKey string
	// RangesKey and BudgetKey name the allow_ranges and budgets keys
	// (defaults sandbox.egress.allow_ranges and sandbox.egress.budgets).
	RangesKey string
	BudgetKey string
	// Upstream, when set, is the proxy allowed hosts are reached through.
	Upstream *Upstream
	// Audit admits hosts the allowlist lacks and logs them as
	// WouldRefuse (network: audit); the address guard still refuses.
	Audit    bool
	Observer Observer
	// MaxConns bounds the step's simultaneous connections to the proxy
	// (1024); more wait in the listen queue.
	MaxConns int
	// RootCAs verifies inject upstreams; nil uses the system's roots.
	RootCAs *x509.CertPool
}

// Decision values.
const (
	Allow  = "allow"  // admitted; reported when the connection ends
	Refuse = "refuse" // refused by policy before any byte went upstream
	Close  = "close"  // closed by policy after it was admitted (SNI, not TLS, budget)
	Fail   = "fail"   // the upstream could not be resolved or reached
	// WouldRefuse (network: audit) is a host the allowlist lacks, admitted
	// and logged; the connection is reported as Allow when it ends, with
	// Rule AuditRule.
	WouldRefuse = "would_refuse"
)

// AuditRule is the Rule of a connection that audit mode admitted.
const AuditRule = "(audit: not in the allowlist)"

// Kinds of decisions.
const (
	KindConnect   = "connect"
	KindHTTP      = "http"
	KindWebSocket = "websocket"
	KindInject    = "inject"
	KindHandOver  = "handover"
	// KindLocal is a connection the step made straight to a local-service
	// port on its own loopback, which the bridge forwards to the host's.
	KindLocal = "local"
)

// Reason codes of decisions.
const (
	ReasonNotAllowed = "host.not_allowed"
	// ReasonPortNotAllowed: an entry names the host, on other ports.
	ReasonPortNotAllowed = "host.port_not_allowed"
	// ReasonLocalPort: the host's loopback on a port no local-service
	// entry lists.
	ReasonLocalPort    = "local.port_not_allowed"
	ReasonMetadata     = "host.metadata"
	ReasonPublicSuffix = "host.public_suffix"
	ReasonIPLiteral    = "host.ip_literal"
	ReasonBadHost      = "host.invalid"
	ReasonAddress      = "address.refused"
	ReasonBudgetHost   = "budget.per_host"
	ReasonBudgetTotal  = "budget.total"
	ReasonSNIMissing   = "sni.missing"
	ReasonSNIMismatch  = "sni.mismatch"
	ReasonNotTLS       = "tunnel.not_tls"
	ReasonBadRequest   = "request.invalid"
	ReasonResolve      = "upstream.resolve"
	ReasonUnreachable  = "upstream.unreachable"
	ReasonTimeout      = "upstream.timeout"
	ReasonIdle         = "idle_timeout"
	ReasonLeaseClosed  = "lease.closed"
	// ReasonUpstreamTLS: inject's upstream presented a certificate the
	// proxy does not trust (unknown authority, wrong name, expired).
	ReasonUpstreamTLS = "upstream.tls_untrusted"
	// ReasonUpstreamProxy: the upstream proxy was down, refused the
	// CONNECT or asked for credentials.
	ReasonUpstreamProxy = "upstream_proxy.failed"
)

// Decision is one record of what the proxy did with one connection or
// request. Allowed connections are reported when they end, with their
// bytes and duration; Time is when the decision was made.
type Decision struct {
	Time      time.Time     `json:"time"`
	Lease     string        `json:"lease"`
	Kind      string        `json:"kind"`
	Host      string        `json:"host"`
	Port      int           `json:"port,omitempty"`
	Addrs     []string      `json:"addrs,omitempty"`  // resolved addresses, in dial order
	Decision  string        `json:"decision"`         // Allow, Refuse, Close or Fail
	Reason    string        `json:"reason,omitempty"` // a Reason* code; "" for a normal end
	Detail    string        `json:"detail,omitempty"` // one line for people, as sent in a 403/502/504
	Rule      string        `json:"rule,omitempty"`   // the allowlist entry that admitted the host
	BytesUp   int64         `json:"bytes_up"`         // sent upstream, on the wire
	BytesDown int64         `json:"bytes_down"`       // received from upstream, on the wire
	Duration  time.Duration `json:"duration_ns"`
}

// Blocked reports whether the decision is a policy refusal: the factory
// turns these into egress.blocked events.
func (d Decision) Blocked() bool { return d.Decision == Refuse || d.Decision == Close }

// Observer receives every decision of a lease. Calls are serialised per
// lease; an observer must not call back into the lease.
type Observer interface {
	Decision(Decision)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Decision)

// Decision implements Observer.
func (f ObserverFunc) Decision(d Decision) { f(d) }

// HostSummary is the per-host account of a lease.
type HostSummary struct {
	Host        string `json:"host"`
	Connections int    `json:"connections"` // admitted connections
	BytesUp     int64  `json:"bytes_up"`
	BytesDown   int64  `json:"bytes_down"`
	Refusals    int    `json:"refusals"` // decisions that Blocked()
}

// Summary is what closing a lease reports (egress.summary).
type Summary struct {
	Lease     string        `json:"lease"`
	Hosts     []HostSummary `json:"hosts"` // sorted by host
	BytesUp   int64         `json:"bytes_up"`
	BytesDown int64         `json:"bytes_down"`
	Refusals  int           `json:"refusals"`
	Decisions int           `json:"decisions"`
}
