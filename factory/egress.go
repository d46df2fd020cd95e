package factory

import (
	"fmt"
	"strings"

	"github.com/kusaw/kusaw/egress"
)

// proxy returns the engine's egress proxy: the one serve shares, or one
// started for this engine on first use.
func (e *Engine) proxy() (*egress.Proxy, error) {
	if e.opts.Proxy != nil {
		return e.opts.Proxy, nil
	}
	e.proxyMu.Lock()
	defer e.proxyMu.Unlock()
	if e.ownProxy == nil {
		p, err := egress.NewProxy(egress.Options{Resolver: e.F.Sandbox.Egress.Resolver})
		if err != nil {
			return nil, err
		}
		e.ownProxy = p
	}
	return e.ownProxy, nil
}

// Close stops what the engine started itself (its egress proxy).
func (e *Engine) Close() error {
	e.proxyMu.Lock()
	defer e.proxyMu.Unlock()
	if e.ownProxy != nil {
		err := e.ownProxy.Close()
		e.ownProxy = nil
		return err
	}
	return nil
}

// noteRefusal keeps a few refusals for the end of kusaw run.
func (r *Run) noteRefusal(step string, n int, d egress.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Record.EgressBlocked++
	key := fmt.Sprintf("%s:%d", d.Host, d.Port)
	for _, s := range r.Record.EgressRefused {
		if strings.Contains(s, " "+key+" ") {
			return
		}
	}
	if len(r.Record.EgressRefused) < 20 {
		detail := d.Detail
		if detail == "" {
			detail = d.Reason
		}
		r.Record.EgressRefused = append(r.Record.EgressRefused, fmt.Sprintf("%s attempt %d: %s refused: %s", step, n, key, detail))
	}
}

// EgressRefusals lists (some of) the hosts the proxy refused during the
// run, one line each, and how many refusals there were in all.
func (r *Run) EgressRefusals() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.Record.EgressRefused...), r.Record.EgressBlocked
}
