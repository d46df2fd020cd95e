package attempt

import (
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

// MaxBlockedEvents caps egress.blocked events per attempt; the rest are
// counted in egress.summary.
const MaxBlockedEvents = 50

// maxSocketPath is below the 107-byte limit of a Unix socket path.
const maxSocketPath = 100

// egressObserver writes an attempt's proxy decisions to its egress.log and
// turns refusals into egress.blocked events (the first 50).
type egressObserver struct {
	a       *Attempt
	mu      sync.Mutex
	log     *chainlog.Writer
	err     error
	blocked int
	// would counts audit mode's would_refuse decisions.
	would  int
	budget bool
	// refusedLines are the refusals' lines, one per host:port (at most
	// 20), for the end of the step's stderr.log.
	refusedLines []string
	refusedKeys  map[string]bool
	// first is the first connection refused for want of an allow entry
	// (the failed attempt's fix names it).
	first *refusedHost
	// untrusted is the proxy's line for the first inject upstream whose
	// certificate it refused (egress.ReasonUpstreamTLS).
	untrusted string
	// reached are the hosts of admitted connections that carried bytes
	// both ways: the evidence a login refresh could have happened.
	reached map[string]bool
}

// reachedHost reports whether the step made a connection to host that
// got an answer (what the carry-back of a refreshed login needs).
func (o *egressObserver) reachedHost(host string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reached[strings.ToLower(host)]
}

func (a *Attempt) egressLog() *egressObserver {
	a.egressOnce.Do(func() {
		o := &egressObserver{a: a}
		// Made on the step's start path: its opening seal reaches the
		// disk with the log's first sync, not before the step starts.
		opts := LogOptions(a.spec.Run, a.step.ID, a.n, chainlog.KindEgress)
		opts.DeferOpenSync = true
		o.log, o.err = chainlog.Create(filepath.Join(a.dir, record.EgressLogFile), a.h.Key, opts)
		a.egress = o
	})
	return a.egress
}

// egressObs is the attempt's egress observer, or nil when it has none; it
// waits for one being made in the background (egressEarly).
func (a *Attempt) egressObs() *egressObserver {
	if a.egressEarly {
		return a.egressLog()
	}
	return a.egress
}

// Decision implements egress.Observer.
func (o *egressObserver) Decision(d egress.Decision) {
	line := map[string]any{
		"time": d.Time.UTC().Format(time.RFC3339Nano), "lease": d.Lease, "kind": d.Kind, "host": d.Host, "port": d.Port,
		"addrs": d.Addrs, "decision": d.Decision, "reason": d.Reason, "detail": d.Detail, "rule": d.Rule,
		"bytes_up": d.BytesUp, "bytes_down": d.BytesDown, "duration_ms": d.Duration.Milliseconds(),
	}
	var failed error
	o.mu.Lock()
	if o.log != nil {
		if err := o.log.Append(line); err != nil && o.err == nil {
			o.err, failed = err, err
		}
	}
	show, showWould := false, false
	if d.Decision == egress.Allow && d.BytesUp > 0 && d.BytesDown > 0 && d.Host != "" {
		if o.reached == nil {
			o.reached = map[string]bool{}
		}
		o.reached[strings.ToLower(d.Host)] = true
	}
	if d.Reason == egress.ReasonUpstreamTLS && o.untrusted == "" {
		o.untrusted = d.Detail
	}
	if d.Decision == egress.WouldRefuse {
		o.would++
		showWould = o.would <= MaxBlockedEvents
	}
	if d.Blocked() {
		o.blocked++
		show = o.blocked <= MaxBlockedEvents
		if k := fmt.Sprintf("%s:%d", d.Host, d.Port); !o.refusedKeys[k] && len(o.refusedLines) < 20 && d.Detail != "" {
			if o.refusedKeys == nil {
				o.refusedKeys = map[string]bool{}
			}
			o.refusedKeys[k] = true
			o.refusedLines = append(o.refusedLines, d.Detail)
		}
		if strings.HasPrefix(d.Reason, "budget.") {
			o.budget = true
		}
		if o.first == nil && notAllowed(d) {
			o.first = &refusedHost{host: d.Host, port: d.Port, local: d.Reason == egress.ReasonLocalPort}
		}
	}
	o.mu.Unlock()
	if failed != nil {
		o.a.writeFailed(filepath.Join(o.a.dir, record.EgressLogFile), failed)
	}
	if d.Blocked() {
		o.a.refusal(d)
	}
	if showWould {
		o.a.events.Emit(record.EvEgressWouldRefuse, map[string]any{"host": d.Host, "port": d.Port, "kind": d.Kind, "reason": d.Reason, "detail": d.Detail})
	}
	if show {
		o.a.events.Emit(record.EvEgressBlocked, map[string]any{"host": d.Host, "port": d.Port, "kind": d.Kind, "reason": d.Reason, "detail": d.Detail, "decision": d.Decision})
	}
}

func (o *egressObserver) untrustedUpstream() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.untrusted
}

func (o *egressObserver) budgetHit() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.budget
}

func (o *egressObserver) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.log != nil {
		_ = o.log.Close()
		o.log = nil
	}
}

// lease opens process i's lease on the proxy (network: allowlist) and
// returns what the sandbox plan needs from it. The lease closes when the
// process has ended, writing egress.summary.
func (a *Attempt) lease(i int, repos []string, p *preparedProc) (*sandbox.Proxy, error) {
	px, err := a.h.Proxy()
	if err != nil {
		return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: "cannot start the egress proxy: " + err.Error(), Fix: status.ReasonEgressLeaseFailed.Info().Fix}
	}
	obs := a.egressLog()
	if obs.err != nil {
		return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: "cannot create egress.log: " + obs.err.Error(), Fix: status.ReasonEgressLeaseFailed.Info().Fix}
	}
	s := a.step
	cfg := egress.LeaseConfig{
		ID:          fmt.Sprintf("%s/%s/%d", a.spec.Run, s.ID, a.n),
		AllowRanges: a.f.Sandbox.Egress.AllowRanges,
		PolicyKey:   config.AllowPolicyKey(s.ID),
		Audit:       a.spec.Processes[i].Network == config.NetworkAudit,
		Observer:    obs,
		RootCAs:     a.h.InjectRootCAs,
	}
	if len(repos) > 0 && len(a.spec.Processes) > 1 {
		cfg.ID += "/" + repos[0]
	}
	if b := a.f.Sandbox.Egress.Budgets; b.Enabled {
		cfg.Budgets = egress.Budgets{PerHost: b.PerHost, Total: b.Total}
	}
	a.rec.Allowlist = nil
	for _, h := range append(a.f.Allowlist(s, p.egressHosts), a.job.ExtraAllow...) {
		cfg.Allow = append(cfg.Allow, egress.Rule{Pattern: h.Pattern, Origin: h.Origin})
		a.rec.Allowlist = append(a.rec.Allowlist, record.AllowedHost{Host: h.Pattern.String(), Origin: h.Origin})
	}
	injects, err := a.injects()
	if err != nil {
		return nil, err
	}
	cfg.Inject = injects
	if cfg.Upstream, err = a.h.upstream(); err != nil {
		return nil, err
	}
	if cfg.Upstream != nil && cfg.Upstream.Auth != "" {
		a.redact.Add(cfg.Upstream.Auth)
		a.redact.Add(base64.StdEncoding.EncodeToString([]byte(cfg.Upstream.Auth)))
	}
	// macOS has no network namespace: the lease listens on a loopback port
	// itself and the Seatbelt profile admits only that port.
	if runtime.GOOS == "darwin" {
		cfg.Listen = "127.0.0.1:0"
		l, err := px.Lease(cfg)
		if err != nil {
			return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: err.Error(), Fix: status.ReasonEgressLeaseFailed.Info().Fix}
		}
		a.closeLeaseAfter(p, l, obs, "")
		_, ps, _ := net.SplitHostPort(l.ListenAddr())
		port, _ := strconv.Atoi(ps)
		return &sandbox.Proxy{Port: port, Env: l.Env(), LocalPorts: l.LeasedLocalPorts()}, nil
	}
	// The hand-over socket: beside the attempt when the path is short
	// enough for a Unix socket, else in a short private temp folder.
	dir := filepath.Join(a.dir, "lease")
	if len(dir)+len("/egress.sock") > maxSocketPath {
		if dir, err = os.MkdirTemp("", "kusaw-lease-"); err != nil {
			return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: err.Error(), Fix: status.ReasonEgressLeaseFailed.Info().Fix}
		}
		// Recovery after a crash finds the folder through this note.
		_ = os.WriteFile(filepath.Join(a.dir, record.LeaseNoteFile), []byte(dir), record.FileMode())
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: err.Error(), Fix: status.ReasonEgressLeaseFailed.Info().Fix}
	}
	cfg.SocketDir, cfg.AwaitPeer = dir, true
	l, err := px.Lease(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: err.Error(), Fix: status.ReasonEgressLeaseFailed.Info().Fix}
	}
	a.closeLeaseAfter(p, l, obs, dir)
	// The bridge's program (kusaw-bridge beside kusaw, else kusaw) is
	// mounted read-only for it.
	wrap := l.BridgeArgv(a.h.Kusaw)
	return &sandbox.Proxy{SocketPath: l.SocketPath(), Env: l.Env(), WrapArgv: wrap, Binaries: []string{wrap[0]}, LocalPorts: l.LeasedLocalPorts()}, nil
}

// injects resolves the step's inject entries: the key comes from the
// secret store and stays in the proxy; the step sees a local base URL and
// the placeholder key.
func (a *Attempt) injects() ([]egress.Inject, error) {
	s := a.step
	var out []egress.Inject
	for i, e := range a.f.Inject(s) {
		in := egress.Inject{Host: e.Host, Header: e.Header, Upstream: e.BaseURL, BaseURLEnv: e.BaseURLEnv, KeyEnv: e.KeyEnv, Name: fmt.Sprintf("inject-%d", i+1)}
		secretKey := e.Secret
		if e.Provider {
			prov, ok := providers.Of(a.f, s.Provider)
			if !ok || s.Kind() != config.KindAgent || prov.Spec().Inject == nil {
				continue // validation reports inject: provider on a step without one
			}
			sp := prov.Spec().Inject
			in = egress.Inject{Name: s.Provider, Host: sp.Host, Header: sp.Header, Upstream: sp.Upstream, BaseURLEnv: sp.BaseURLEnv, KeyEnv: sp.KeyEnv}
			secretKey = sp.SecretKey
			in.CAKey = "providers." + s.Provider + ".ca_file"
			if pc := a.f.Providers[s.Provider]; pc != nil {
				if pc.BaseURL != "" {
					in.Upstream = pc.BaseURL
				}
				if pc.CAFile != "" || len(pc.CAPEM) > 0 {
					pool, err := caPool(pc.CAFile, pc.CAPEM)
					if err != nil {
						return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: fmt.Sprintf("%s: %v", in.CAKey, err),
							Fix: "name a readable PEM file of CA certificates in " + in.CAKey + " (kusaw validate checks it)"}
					}
					in.RootCAs = pool
				}
				if pc.APIKey != nil {
					secretKey = pc.APIKey.Key
				}
			}
		}
		if strings.EqualFold(in.Header, "authorization") {
			in.ValuePrefix = "Bearer "
		}
		src, err := a.h.secrets()
		if err != nil {
			return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: "cannot open the secret store: " + err.Error(), Fix: status.SecretStoreFix}
		}
		key, err := src.Get(secretKey)
		if err != nil {
			return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: fmt.Sprintf("inject %s: secret %s is not in the secret store", in.Name, secretKey), Fix: "kusaw config set " + secretKey + " --secret"}
		}
		a.redact.Add(key)
		in.Key = key
		out = append(out, in)
	}
	return out, nil
}

// closeLeaseAfter closes the lease when process p has ended (or will not
// start) and writes egress.summary; dir is the lease's socket folder.
func (a *Attempt) closeLeaseAfter(p *preparedProc, l *egress.Lease, obs *egressObserver, dir string) {
	p.lease = l
	prev := p.cleanup
	p.cleanup = func() {
		if prev != nil {
			prev()
		}
		sum := l.Close()
		if dir != "" {
			os.RemoveAll(dir)
		}
		hosts := make([]map[string]any, 0, len(sum.Hosts))
		a.mu.Lock()
		if a.rec.Egress == nil {
			a.rec.Egress = &record.EgressTotals{}
		}
		a.rec.Egress.BytesUp += sum.BytesUp
		a.rec.Egress.BytesDown += sum.BytesDown
		a.rec.Egress.Refusals += sum.Refusals
		for _, h := range sum.Hosts {
			a.rec.Egress.Connections += h.Connections
		}
		a.mu.Unlock()
		for _, h := range sum.Hosts {
			hosts = append(hosts, map[string]any{"host": h.Host, "connections": h.Connections, "bytes_up": h.BytesUp, "bytes_down": h.BytesDown, "refusals": h.Refusals})
		}
		obs.mu.Lock()
		blocked := obs.blocked
		lines := append([]string(nil), obs.refusedLines...)
		obs.mu.Unlock()
		// The step's own stderr ends with what the proxy refused, in the
		// words of kusaw egress check, so reading it is enough.
		if len(lines) > 0 {
			if f, err := os.OpenFile(filepath.Join(a.dir, p.stderr), os.O_WRONLY|os.O_APPEND|os.O_CREATE, record.FileMode()); err == nil {
				fmt.Fprintf(f, "kusaw: the egress proxy refused %d connection(s) of this attempt:\n", blocked)
				for _, l := range lines {
					fmt.Fprintf(f, "  %s\n", l)
				}
				if blocked > len(lines) {
					fmt.Fprintf(f, "  ... and more: see egress.log (kusaw egress suggest %s --step %s lists them)\n", a.spec.Run, a.step.ID)
				}
				f.Close()
			}
		}
		data := map[string]any{"lease": sum.Lease, "hosts": hosts, "bytes_up": sum.BytesUp, "bytes_down": sum.BytesDown,
			"refusals": sum.Refusals, "decisions": sum.Decisions, "bridged": l.HandedOver()}
		if blocked > MaxBlockedEvents {
			data["blocked_not_shown"] = blocked - MaxBlockedEvents
		}
		obs.mu.Lock()
		would := obs.would
		obs.mu.Unlock()
		if would > 0 {
			data["would_refuse"] = would
		}
		if would > MaxBlockedEvents {
			data["would_refuse_not_shown"] = would - MaxBlockedEvents
		}
		a.events.Emit(record.EvEgressSummary, data)
	}
}

// caPool is the system's roots and the certificates of a PEM file
// (providers.<name>.ca_file): its content as loaded, else the file.
func caPool(path string, b []byte) (*x509.CertPool, error) {
	if len(b) == 0 {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			return nil, err
		}
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
