package factory

import (
	"context"
	"fmt"
	"strings"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// EgressPolicy is the proxy policy a step's attempts get (stepID ""
// gives the factory's own: sandbox.egress.allow without provider hosts).
func (e *Engine) EgressPolicy(stepID string) (egress.Policy, error) {
	s := &config.Step{ID: "_factory"}
	if stepID != "" {
		s = e.F.Steps[stepID]
		if s == nil {
			return egress.Policy{}, fmt.Errorf("%w %q (steps: %v)", record.ErrUnknownStep, stepID, e.F.StepOrder)
		}
	}
	pol := egress.Policy{AllowRanges: e.F.Sandbox.Egress.AllowRanges, PolicyKey: config.AllowPolicyKey(s.ID),
		Audit: e.F.StepNetwork(s) == config.NetworkAudit}
	for _, h := range e.F.Allowlist(s, providerHosts(e.F, s)) {
		pol.Allow = append(pol.Allow, egress.Rule{Pattern: h.Pattern, Origin: h.Origin})
	}
	pol.Upstream, _ = e.upstream(false)
	return pol, nil
}

// upstream is sandbox.egress.upstream_proxy for the proxy (nil when
// unset); withAuth reads its credentials from the secret store.
func (e *Engine) upstream(withAuth bool) (*egress.Upstream, error) {
	c := e.F.Sandbox.Egress.UpstreamProxy
	if c == nil {
		return nil, nil
	}
	up := &egress.Upstream{URL: strings.TrimSuffix(c.URL, "/")}
	for _, h := range e.F.Sandbox.Egress.UpstreamNoProxy {
		up.NoProxy = append(up.NoProxy, h.Pattern)
	}
	if withAuth && c.Credentials != nil {
		src, err := e.secretSource()
		if err != nil {
			return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: "cannot open the secret store: " + err.Error(), Fix: status.SecretStoreFix}
		}
		v, err := src.Get(c.Credentials.Key)
		if err != nil {
			return nil, &status.Error{Reason: status.ReasonSecretMissing, Msg: fmt.Sprintf("upstream_proxy: secret %s is not in the secret store", c.Credentials.Key), Fix: "kusaw config set " + c.Credentials.Key + " --secret (value user:password)"}
		}
		up.Auth = v
	}
	return up, nil
}

// EgressCheck is kusaw egress check: what the proxy would decide on a
// connection to host:port from the step's sandbox, resolving as the proxy
// does (sandbox.egress.resolver).
func (e *Engine) EgressCheck(ctx context.Context, stepID, host string, port int) (egress.Verdict, error) {
	pol, err := e.EgressPolicy(stepID)
	if err != nil {
		return egress.Verdict{}, err
	}
	p, err := e.proxy()
	if err != nil {
		return egress.Verdict{}, err
	}
	v := p.Check(ctx, pol, host, port)
	s := &config.Step{ID: "_factory"}
	if stepID != "" {
		s = e.F.Steps[stepID]
	}
	if n := e.F.StepNetwork(s); !n.Proxied() {
		v.Notes = append(v.Notes, fmt.Sprintf("the network here is %s: this is what network: allowlist would decide; today nothing is checked", n))
	} else if stepID != "" && !e.anyAttemptSandboxed(s) {
		v.Notes = append(v.Notes, "the step's sandbox is off: this is what its sandbox would decide; today nothing is checked (W2)")
	}
	return v, nil
}

func (e *Engine) anyAttemptSandboxed(s *config.Step) bool {
	for _, repos := range e.F.Attempts(s) {
		if m, _ := e.F.EffectiveMode(s, repos); m == config.ModeRequired {
			return true
		}
	}
	return false
}

// EgressCheckPipeline is EgressCheck without a step: under the allowlist
// of each step of the default pipeline, in order, the first that allows
// the connection deciding (the note says which, and which were checked),
// else the first step's refusal. A factory without a default pipeline is
// checked under the factory's allowlist, as before.
func (e *Engine) EgressCheckPipeline(ctx context.Context, host string, port int) (egress.Verdict, error) {
	name, steps, err := e.Pipeline("")
	if err != nil || len(steps) == 0 {
		return e.EgressCheck(ctx, "", host, port)
	}
	ids := make([]string, len(steps))
	for i, s := range steps {
		ids[i] = s.ID
	}
	var first egress.Verdict
	for i, s := range steps {
		v, err := e.EgressCheck(ctx, s.ID, host, port)
		if err != nil {
			return v, err
		}
		if v.Allowed {
			v.Notes = append([]string{fmt.Sprintf("decided under step %s's allowlist: the first step of pipeline %s (%s) that allows it; --step ID asks for one step", s.ID, name, strings.Join(ids, ", "))}, v.Notes...)
			return v, nil
		}
		if i == 0 {
			first = v
		}
	}
	first.Notes = append([]string{fmt.Sprintf("no step of pipeline %s (%s) allows it; shown: step %s's decision (--step ID asks for one step)", name, strings.Join(ids, ", "), ids[0])}, first.Notes...)
	return first, nil
}
