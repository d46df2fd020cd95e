package factory

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
)

// Report is what kusaw validate prints: the findings, each step's resolved
// sandbox, and the backend's availability when any attempt could be
// sandboxed.
type Report struct {
	OK       bool             `json:"ok"`
	File     string           `json:"file"`
	Errors   []config.Finding `json:"errors"`
	Warnings []config.Finding `json:"warnings"`
	Steps    []StepReport     `json:"steps"`
	Sandbox  *SandboxReport   `json:"sandbox,omitempty"`
	// Pipelines are drawn as graphs: groups, candidates, fixers, judges,
	// resolves and gates (graph.go).
	Pipelines []PipelineGraph `json:"pipelines"`
}

// StepReport is one step's effective sandbox.
type StepReport struct {
	ID         string       `json:"id"`
	Kind       string       `json:"kind"`
	Provider   string       `json:"provider,omitempty"`
	Mode       string       `json:"mode"`
	ModeOrigin string       `json:"mode_origin"`
	Network    string       `json:"network"`
	Allowlist  []HostReport `json:"allowlist"`
	Inject     []string     `json:"inject"`
	// LocalPorts are the host loopback ports the step's local-service
	// entries lease (reached through the proxy, and on Linux directly).
	LocalPorts []int           `json:"local_ports,omitempty"`
	Attempts   []AttemptReport `json:"attempts,omitempty"`
	// Setup says where the factory's setup commands run for this step
	// (docs/sandbox.md, "What a step leaves behind"); empty when there is
	// no setup.
	Setup string `json:"setup,omitempty"`
}

// AttemptReport is the effective mode of one per_repo attempt process.
type AttemptReport struct {
	Repos      []string `json:"repos"`
	Mode       string   `json:"mode"`
	ModeOrigin string   `json:"mode_origin"`
	Network    string   `json:"network"`
}

// HostReport is one allowlist entry and where it came from.
type HostReport struct {
	Host   string `json:"host"`
	Origin string `json:"origin"`
}

// SandboxReport is the backend's availability on this machine.
type SandboxReport struct {
	Backend   string `json:"backend"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	Fix       string `json:"fix,omitempty"`
}

// Validator runs the checks that need more than the file: providers, the
// secret store, the repos' remotes, the sandbox backend. Fields are
// replaceable for tests.
type Validator struct {
	Secrets      *secretstore.Store
	SandboxCheck func() sandbox.CheckResult
	GOOS         string
	// Getenv reads kusaw's own environment (W7: a proxy the factory
	// does not set); nil reads nothing.
	Getenv func(string) string
	// PoolsOffered reads the pools serve's workers have ever offered and
	// may take (the cluster's registry); nil knows of none.
	PoolsOffered func() map[string]bool
	// PoolsAllowed reads the pools some enrolled worker's join token
	// allows ("*": one allows every pool); nil does not tell.
	PoolsAllowed func() map[string]bool
}

// NewValidator uses the real secret store, backend check and OS.
func NewValidator() *Validator {
	v := &Validator{SandboxCheck: sandbox.Check, GOOS: runtime.GOOS, Getenv: os.Getenv}
	if s, err := secretstore.Open(); err == nil {
		v.Secrets = s
	}
	return v
}

// Validate completes the loader's findings into a Report.
func (v *Validator) Validate(f *config.Factory, fs config.Findings) Report {
	r := Report{File: f.Path, Steps: []StepReport{}, Pipelines: Graphs(f)}
	fs = append(fs, v.providerChecks(f)...)
	fs = append(fs, v.secretChecks(f)...)
	fs = append(fs, limitChecks(f)...)
	// A candidate with a provider of its own is checked as if the step
	// ran with it: its inject, capabilities, token and limits.
	for _, cf := range candidateVariants(f) {
		var more config.Findings
		more = append(more, v.providerChecks(cf)...)
		more = append(more, v.secretChecks(cf)...)
		more = append(more, limitChecks(cf)...)
		for _, x := range more {
			if !slices.ContainsFunc(fs, func(y config.Finding) bool { return y.Code == x.Code && y.Path == x.Path && y.Message == x.Message }) {
				fs = append(fs, x)
			}
		}
	}
	fs = append(fs, providerArgChecks(f)...)
	fs = append(fs, v.envProxyCheck(f)...)
	fs = append(fs, unsandboxedAfterChecks(f)...)
	fs = append(fs, cacheSharedChecks(f)...)
	fs = append(fs, v.poolChecks(f)...)
	fs = append(fs, v.toolchainChecks(f)...)
	fs = append(fs, continueSessionChecks(f, v.GOOS)...)
	fs = append(fs, placeholderPromptChecks(f)...)
	fs.Sort()
	r.Errors = fs.Errors()
	r.Warnings = fs.Warnings()
	r.OK = len(r.Errors) == 0
	anySandboxed := false
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		sr := stepReport(f, s)
		for _, a := range sr.Attempts {
			if a.Mode == string(config.ModeRequired) {
				anySandboxed = true
			}
		}
		if !s.PerRepo {
			sr.Attempts = nil
		}
		r.Steps = append(r.Steps, sr)
	}
	if anySandboxed && v.SandboxCheck != nil {
		c := v.SandboxCheck()
		r.Sandbox = &SandboxReport{Backend: c.Backend, Available: c.Available, Reason: string(c.Reason), Fix: c.Fix}
		if !c.Available && c.Msg != "" {
			r.Sandbox.Reason = string(c.Reason) + ": " + c.Msg
		}
	}
	return r
}

// candidateVariants are copies of f in which each step whose candidates
// name providers runs with its k-th candidate's, for each k where one
// differs from the step's own.
func candidateVariants(f *config.Factory) []*config.Factory {
	var out []*config.Factory
	for k := 0; k < 10; k++ {
		var cf *config.Factory
		for id, s := range f.Steps {
			if k >= len(s.CandidateProviders) || s.CandidateProviders[k] == s.Provider {
				continue
			}
			if cf == nil {
				c := *f
				c.Steps = maps.Clone(f.Steps)
				cf = &c
			}
			cs := *s
			cs.Provider = s.CandidateProviders[k]
			cf.Steps[id] = &cs
		}
		if cf != nil {
			out = append(out, cf)
		}
	}
	return out
}

// providerArgChecks refuses providers.<name>.args that kusaw would refuse
// when the step starts (E007): a flag kusaw sets itself, one that breaks
// the stream (Cursor's --stream-partial-output), a key in argv.
func providerArgChecks(f *config.Factory) config.Findings {
	var out config.Findings
	for _, name := range f.ProviderChoices() {
		pc := f.Providers[name]
		p, ok := providers.Of(f, name)
		if pc == nil || !ok || len(pc.Args) == 0 {
			continue
		}
		if _, err := p.Argv(providers.RunRequest{Command: "x", Args: pc.Args, Prompt: "validate"}); err != nil {
			path := "providers." + name + ".args"
			pos := f.PosOf(path)
			out = append(out, config.Finding{Code: config.ECodeBadValue, Severity: config.SevError, Path: path, Line: pos.Line, Column: pos.Column,
				Message: err.Error(), Fix: "remove that argument from " + path, File: f.Path})
		}
	}
	return out
}

// limitChecks refuses limits kusaw could not watch (E062): cost, tokens
// and turns on a step that runs no agent, and a cost limit over a
// provider that does not report cost.
func limitChecks(f *config.Factory) config.Findings {
	var out config.Findings
	add := func(path, fix, format string, args ...any) {
		pos := f.PosOf(path)
		out = append(out, config.Finding{Code: config.ECodeCapMissing, Severity: config.SevError, Path: path, Line: pos.Line, Column: pos.Column,
			Message: fmt.Sprintf(format, args...), Fix: fix, File: f.Path})
	}
	noCost := func(s *config.Step) bool {
		if s.Kind() != config.KindAgent {
			return false
		}
		p, ok := providers.Of(f, s.Provider)
		if !ok {
			return false
		}
		cell, _ := providers.MatrixOf(p, providers.Mode{Network: "open"}).Get(providers.CapCostReporting)
		return cell.Level != providers.Supported
	}
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		l := s.Limits
		if l == nil {
			continue
		}
		path := "steps." + id + ".limits"
		if s.Kind() != config.KindAgent && (l.CostUSD > 0 || l.Tokens > 0 || l.Turns > 0) {
			add(path, "keep only duration for a step that runs no agent (or use timeout)",
				"step %s is a %s step: cost_usd, tokens and turns come from an agent's provider", id, s.Kind())
		}
		if l.CostUSD > 0 && noCost(s) {
			add(path+".cost_usd", "limit tokens or turns instead",
				"step %s: provider %s does not report cost (its cost_reporting is only partial), so limits.cost_usd cannot be watched", id, s.Provider)
		}
	}
	for _, name := range f.PipelineOrder {
		pl := f.Pipelines[name]
		if pl == nil || pl.Limits == nil || pl.Limits.CostUSD == 0 {
			continue
		}
		for _, it := range pl.Steps {
			for _, id := range it.IDs() {
				if s := f.Steps[id]; s != nil && noCost(s) {
					add("pipelines."+name+".limits.cost_usd", "limit tokens instead, or run that step with a provider that reports cost",
						"pipeline %s: step %s's provider %s does not report cost, so the run's cost_usd cannot be watched", name, id, s.Provider)
				}
			}
		}
	}
	return out
}

func providerHosts(f *config.Factory, s *config.Step) []string {
	if s.Kind() != config.KindAgent {
		return nil
	}
	if p, ok := providers.Of(f, s.Provider); ok {
		return p.Spec().EgressHosts
	}
	return nil
}

func stepReport(f *config.Factory, s *config.Step) StepReport {
	sr := StepReport{ID: s.ID, Kind: string(s.Kind()), Allowlist: []HostReport{}, Inject: []string{}}
	if s.Kind() == config.KindAgent {
		sr.Provider = s.Provider
	}
	for i, repos := range f.Attempts(s) {
		m, origin := f.EffectiveMode(s, repos)
		n := f.EffectiveNetwork(s, m)
		sr.Attempts = append(sr.Attempts, AttemptReport{Repos: repos, Mode: string(m), ModeOrigin: origin, Network: string(n)})
		// The step's headline is its strictest attempt.
		if i == 0 || m == config.ModeRequired && sr.Mode != string(config.ModeRequired) {
			sr.Mode, sr.ModeOrigin, sr.Network = string(m), origin, string(n)
		}
	}
	if len(f.Setup) > 0 {
		sr.Setup = SetupPlacement(config.Mode(sr.Mode), config.Network(sr.Network))
	}
	if config.Network(sr.Network).Proxied() {
		var rules []egress.Rule
		for _, h := range f.Allowlist(s, providerHosts(f, s)) {
			sr.Allowlist = append(sr.Allowlist, HostReport{Host: h.Pattern.String(), Origin: h.Origin})
			rules = append(rules, egress.Rule{Pattern: h.Pattern, Origin: h.Origin})
		}
		sr.Inject = InjectedEnvNames(f, s)
		sr.LocalPorts = egress.LocalPorts(rules)
	}
	return sr
}

// InjectedEnvNames are the env names an attempt gets from inject (never
// the values): each entry's base URL and key variables.
func InjectedEnvNames(f *config.Factory, s *config.Step) []string {
	names := []string{}
	for _, e := range f.Inject(s) {
		if e.Provider {
			if p, ok := providers.Of(f, s.Provider); ok && s.Kind() == config.KindAgent && p.Spec().Inject != nil {
				in := p.Spec().Inject
				names = append(names, in.BaseURLEnv, in.KeyEnv)
			}
			continue
		}
		names = append(names, e.BaseURLEnv, e.KeyEnv)
	}
	return names
}

// Programs known to ignore HTTP(S)_PROXY: under an allowlist they cannot
// reach anything (they fail closed), which W1 says before a run does.
var proxyIgnorers = map[string]string{
	"ssh": "ssh", "scp": "ssh", "sftp": "ssh", "rsync": "rsync over ssh", "ping": "ICMP", "ping6": "ICMP",
	"nc": "raw sockets", "ncat": "raw sockets", "netcat": "raw sockets", "socat": "raw sockets", "telnet": "raw sockets",
	"ftp": "FTP", "dig": "DNS", "nslookup": "DNS", "host": "DNS", "traceroute": "raw sockets",
	"node": "Node 20's fetch ignores proxy variables", "nodejs": "Node 20's fetch ignores proxy variables",
	"deno": "raw sockets", "mosh": "UDP",
}

func (v *Validator) providerChecks(f *config.Factory) config.Findings {
	var out config.Findings
	add := func(sev config.Severity, code, path, fix, format string, args ...any) {
		pos := f.PosOf(path)
		out = append(out, config.Finding{Code: code, Severity: sev, Path: path, Line: pos.Line, Column: pos.Column,
			Message: fmt.Sprintf(format, args...), Fix: fix, File: f.Path})
	}
	sshRemotes := map[string]string{}
	for _, name := range f.RepoOrder {
		if u := sshRemote(f.Repos[name].Path); u != "" {
			sshRemotes[name] = u
		}
	}
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		sp := "steps." + id
		for _, repos := range f.Attempts(s) {
			mode, _ := f.EffectiveMode(s, repos)
			netw := f.EffectiveNetwork(s, mode)
			if !netw.Proxied() {
				continue
			}
			// W1: tools that bypass the proxy.
			if s.Kind() == config.KindCommand {
				prog := filepath.Base(s.Run[0])
				if why, ok := proxyIgnorers[prog]; ok {
					add(config.SevWarning, config.WCodeProxyIgnored, sp+".run", "use a client that honours HTTPS_PROXY, or run it in setup (outside the sandbox)",
						"step %s runs %s (%s), which ignores HTTP(S)_PROXY: under the allowlist it cannot connect", id, prog, why)
				}
			}
			for _, r := range repos {
				if u, ok := sshRemotes[r]; ok {
					add(config.SevWarning, config.WCodeProxyIgnored, sp, "use an https:// remote, or fetch and push outside the sandbox (kusaw does its own git outside)",
						"repo %s has an ssh remote (%s): git over ssh ignores the proxy and fails inside step %s", r, u, id)
				}
			}
			if s.Kind() != config.KindAgent {
				break
			}
			p, ok := providers.Of(f, s.Provider)
			if !ok {
				break
			}
			// W3: handshake hosts are never added automatically.
			allowed := f.Allowlist(s, providerHosts(f, s))
			var missing []string
			for _, h := range p.Spec().HandshakeHosts {
				if !hostAllowed(allowed, h) {
					missing = append(missing, h)
				}
			}
			if len(missing) > 0 {
				add(config.SevWarning, config.WCodeHandshake, sp, "add the ones the CLI needs to steps."+id+".sandbox.egress.allow (login and telemetry are refused until listed)",
					"%s's handshake hosts are not allowed for step %s: %s", s.Provider, id, strings.Join(missing, ", "))
			}
			break
		}
		// E062: capabilities the provider or mode lacks.
		for _, repos := range f.Attempts(s) {
			mode, _ := f.EffectiveMode(s, repos)
			netw := f.EffectiveNetwork(s, mode)
			injects := false
			for _, e := range f.Inject(s) {
				if e.Provider {
					injects = true
				}
			}
			if s.Kind() == config.KindAgent {
				p, ok := providers.Of(f, s.Provider)
				if !ok {
					break // the loader reported the unknown provider
				}
				if injects && p.Spec().Inject == nil {
					add(config.SevError, config.ECodeCapMissing, sp, "remove inject: provider for this step, or use an explicit inject entry",
						"step %s: provider %s cannot take an injected key (its CLI has no custom endpoint)", id, s.Provider)
				}
				mx := providers.MatrixOf(p, providers.Mode{Sandboxed: mode == config.ModeRequired, Network: providerNetwork(netw),
					Inject: injects, FreshHome: providers.FreshHome(v.GOOS, mode == config.ModeRequired)})
				for _, err := range mx.Unmet(s.Requires) {
					var ue *providers.UnmetError
					if errors.As(err, &ue) && (ue.Capability == providers.CapNetwork || ue.Capability == providers.CapSandbox) {
						continue // the loader already said it, with its own code
					}
					add(config.SevError, config.ECodeCapMissing, sp+".requires", "remove it from requires, or change the step's provider or sandbox", "step %s %v", id, err)
				}
				// W4: a fresh HOME needs a login token.
				need := providers.NeedsTokenOf(p, id, providers.FreshHome(v.GOOS, mode == config.ModeRequired), injects)
				var names []string
				for n := range s.Env {
					names = append(names, n+"=")
				}
				if !need.Satisfied(names) {
					add(config.SevWarning, config.WCodeTokenMissing, sp, need.Fix, "%s", need.Err(names).Msg)
				}
			} else {
				for _, c := range s.Requires {
					switch c {
					case "inject", "stream_events", "resume", "cost_reporting":
						add(config.SevError, config.ECodeCapMissing, sp+".requires", "remove it from requires: only agent steps have it",
							"step %s requires %s, which only agent steps have", id, c)
					}
				}
			}
			break
		}
	}
	return out
}

func hostAllowed(allowed []config.AllowedHost, host string) bool {
	for _, a := range allowed {
		if a.Pattern.Matches(host, 443, 443) {
			return true
		}
	}
	return false
}

// sshRemote returns the first remote URL of a repo that uses ssh.
func sshRemote(repo string) string {
	out, err := exec.Command("git", "-C", repo, "config", "--get-regexp", `^remote\..*\.url$`).Output()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		_, u, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if strings.HasPrefix(u, "ssh://") || strings.HasPrefix(u, "git+ssh://") ||
			(!strings.Contains(u, "://") && strings.Contains(u, "@") && strings.Contains(u, ":")) {
			return u
		}
	}
	return ""
}

func (v *Validator) secretChecks(f *config.Factory) config.Findings {
	if v.Secrets == nil {
		return nil
	}
	type ref struct{ key, path string }
	var refs []ref
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		for _, n := range s.EnvOrder {
			if e := s.Env[n]; e.Secret != nil {
				refs = append(refs, ref{e.Secret.Key, "steps." + id + ".env." + n})
			}
		}
		if s.Sandbox != nil {
			for _, e := range s.Sandbox.Inject {
				if e.Secret != "" {
					refs = append(refs, ref{e.Secret, "steps." + id + ".sandbox.egress.inject"})
				}
			}
		}
	}
	names := make([]string, 0, len(f.Providers))
	for n := range f.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if k := f.Providers[n].APIKey; k != nil {
			refs = append(refs, ref{k.Key, "providers." + n + ".api_key"})
		}
	}
	for _, e := range f.Sandbox.Egress.Inject {
		if e.Secret != "" {
			refs = append(refs, ref{e.Secret, "sandbox.egress.inject"})
		}
	}
	// inject: provider without providers.NAME.api_key takes the provider's
	// default key; the run needs it as much as a named one.
	defaults := map[string]bool{}
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		if s.Kind() != config.KindAgent || defaults[s.Provider] {
			continue
		}
		if pc := f.Providers[s.Provider]; pc != nil && pc.APIKey != nil {
			continue
		}
		p, ok := providers.Of(f, s.Provider)
		if !ok || p.Spec().Inject == nil {
			continue
		}
		if slices.ContainsFunc(f.Inject(s), func(e config.InjectEntry) bool { return e.Provider }) {
			defaults[s.Provider] = true
			path := "sandbox.egress.inject"
			if s.Sandbox != nil && s.Sandbox.InjectSet {
				path = "steps." + id + ".sandbox.egress.inject"
			}
			refs = append(refs, ref{p.Spec().Inject.SecretKey, path})
		}
	}
	if up := f.Sandbox.Egress.UpstreamProxy; up != nil && up.Credentials != nil {
		refs = append(refs, ref{up.Credentials.Key, "sandbox.egress.upstream_proxy.credentials"})
	}
	if c := f.Serve.Cluster; c != nil && c.SigningKey != nil {
		refs = append(refs, ref{c.SigningKey.Key, "serve.cluster.signing_key"})
	}
	if c := f.Serve.Cluster; c != nil && c.SystemKey != nil && c.OperatorKey != nil {
		refs = append(refs, ref{c.SystemKey.Key, "serve.cluster.system_key"}, ref{c.OperatorKey.Key, "serve.cluster.operator_key"})
	}
	for i, n := range f.Notify {
		if n.Secret != nil {
			refs = append(refs, ref{n.Secret.Key, fmt.Sprintf("notify[%d].secret", i)})
		}
	}
	for _, name := range f.PipelineOrder {
		for i, n := range f.Pipelines[name].Notify {
			if n.Secret != nil {
				refs = append(refs, ref{n.Secret.Key, fmt.Sprintf("pipelines.%s.notify[%d].secret", name, i)})
			}
		}
	}
	var out config.Findings
	keys, err := v.Secrets.Keys()
	if err != nil {
		return out
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	for _, r := range refs {
		if !have[r.key] {
			pos := f.PosOf(r.path)
			what := "the step will be refused"
			if strings.Contains(r.path, "notify[") {
				what = "the webhook will not be sent (a signed notification needs its key)"
			}
			switch r.path {
			case "serve.cluster.signing_key":
				what = "serve cannot sign in to the NATS cluster and will not start"
			case "serve.cluster.system_key", "serve.cluster.operator_key":
				what = "serve cannot revoke retired workers on the NATS account and will not start"
			}
			out = append(out, config.Finding{Code: config.WCodeSecretMissing, Severity: config.SevWarning, Path: r.path, Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("secret %s is not in the secret store; %s", r.key, what),
				Fix:     "kusaw config set " + r.key + " --secret", File: f.Path})
		}
	}
	return out
}

// envProxyCheck is W7: kusaw's environment names a proxy, a step's
// network goes through kusaw's proxy, and the factory sets no
// upstream_proxy. kusaw's proxy never reads HTTPS_PROXY itself, so it
// would dial hosts directly, which a corporate network usually refuses.
func (v *Validator) envProxyCheck(f *config.Factory) config.Findings {
	if v.Getenv == nil || f.Sandbox.Egress.UpstreamProxy != nil {
		return nil
	}
	var name, val string
	for _, n := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"} {
		if val = v.Getenv(n); val != "" {
			name = n
			break
		}
	}
	if name == "" {
		return nil
	}
	proxied := false
	for _, id := range f.StepOrder {
		proxied = proxied || f.StepNetwork(f.Steps[id]).Proxied()
	}
	if !proxied {
		return nil
	}
	shown := val
	if u, err := url.Parse(val); err == nil && u.Host != "" {
		shown = u.Scheme + "://" + u.Host // never the credentials
	}
	pos := f.PosOf("sandbox.egress")
	return config.Findings{{Code: config.WCodeEnvProxy, Severity: config.SevWarning, Path: "sandbox.egress", Line: pos.Line, Column: pos.Column, File: f.Path,
		Message: fmt.Sprintf("kusaw's environment sets %s=%s, but kusaw's egress proxy never reads it and dials allowed hosts directly", name, shown),
		Fix:     fmt.Sprintf("set sandbox.egress.upstream_proxy: %s (credentials as {url: ..., credentials: {secret: KEY}}), or unset %s if hosts are reachable directly", shown, name)}}
}

// SetupPlacement says where setup runs for a step of this mode: on the
// host on the commit a run starts from; on any later commit (one a step of
// the run may have written) inside the step's sandbox, or on the host when
// the step itself runs outside one.
func SetupPlacement(m config.Mode, n config.Network) string {
	if m == config.ModeRequired {
		return fmt.Sprintf("on the host on the run's starting commit; on commits a step of the run wrote, inside this step's sandbox (network: %s)", n)
	}
	return "on the host (the step itself runs outside a sandbox, on the same code)"
}

// unsandboxedAfterChecks warns (W12) where a pipeline runs a step outside
// the sandbox after a sandboxed one: that step, and its setup, run on the
// host the code the sandboxed step may have written (docs/sandbox.md,
// "What a step leaves behind"). Members of one parallel group start from
// the same commit, so only earlier items count.
func unsandboxedAfterChecks(f *config.Factory) config.Findings {
	var out config.Findings
	warned := map[string]bool{}
	sandboxed := func(s *config.Step) bool {
		for _, repos := range f.Attempts(s) {
			if m, _ := f.EffectiveMode(s, repos); m == config.ModeRequired {
				return true
			}
		}
		return false
	}
	for _, name := range f.PipelineOrder {
		p := f.Pipelines[name]
		if p == nil {
			continue
		}
		first := ""
		for _, it := range p.Steps {
			later := first
			for _, id := range it.IDs() {
				s := f.Steps[id]
				if s == nil {
					continue
				}
				if later != "" && !sandboxed(s) && !warned[id] {
					warned[id] = true
					path := "steps." + id
					pos := f.PosOf(path)
					out = append(out, config.Finding{Code: config.WCodeUnsandboxedAfter, Severity: config.SevWarning, Path: path, Line: pos.Line, Column: pos.Column, File: f.Path,
						Message: fmt.Sprintf("step %s runs outside the sandbox after sandboxed step %s (pipeline %s): it and its setup run, on the host, code %s may have written", id, later, name, later),
						Fix:     fmt.Sprintf("set steps.%s.sandbox: required, or move it before %s", id, later)})
				}
				if first == "" && sandboxed(s) {
					first = id
				}
			}
		}
	}
	return out
}

// cacheSharedChecks warns (W14) on a step outside the sandbox that uses a
// cache folder a sandboxed step also uses, in any pipeline: caches outlive
// runs, and what a sandboxed step leaves there (a Go toolchain in
// GOMODCACHE, a config.toml in CARGO_HOME) the host's tools then run.
func cacheSharedChecks(f *config.Factory) config.Findings {
	var out config.Findings
	sandboxedBy := map[string]string{} // cache path -> a sandboxed step using it
	ids := make([]string, 0, len(f.Steps))
	for id := range f.Steps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	sandboxed := func(s *config.Step) bool {
		for _, repos := range f.Attempts(s) {
			if m, _ := f.EffectiveMode(s, repos); m == config.ModeRequired {
				return true
			}
		}
		return false
	}
	for _, id := range ids {
		if s := f.Steps[id]; sandboxed(s) {
			for _, c := range f.StepCaches(s) {
				if sandboxedBy[c.Path] == "" {
					sandboxedBy[c.Path] = id
				}
			}
		}
	}
	for _, id := range ids {
		s := f.Steps[id]
		if sandboxed(s) {
			continue
		}
		for _, c := range f.StepCaches(s) {
			by := sandboxedBy[c.Path]
			if by == "" {
				continue
			}
			path := "steps." + id
			pos := f.PosOf(path)
			out = append(out, config.Finding{Code: config.WCodeCacheUnsandboxed, Severity: config.SevWarning, Path: path, Line: pos.Line, Column: pos.Column, File: f.Path,
				Message: fmt.Sprintf("step %s runs outside the sandbox with cache %s, which sandboxed step %s writes: it runs, on the host, what %s left there", id, c.Name, by, by),
				Fix:     fmt.Sprintf("set steps.%s.sandbox: required, or give it a cache of its own (steps.%s.caches: {%s: {path: ...}})", id, id, c.Name)})
			break
		}
	}
	return out
}

// poolChecks warns about a step whose pool no worker has ever offered
// (W13), naming the case where no worker's join token even allows it:
// its attempts would wait in the queue for a worker that may not exist.
// Pool default is served by serve itself unless local_worker is false.
func (v *Validator) poolChecks(f *config.Factory) config.Findings {
	var out config.Findings
	var offered, allowed map[string]bool
	if v.PoolsOffered != nil {
		offered = v.PoolsOffered()
	}
	if v.PoolsAllowed != nil {
		allowed = v.PoolsAllowed()
	}
	c := f.Serve.Cluster
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		pool := s.Pool
		if pool == "" {
			pool = config.DefaultPool
		}
		path := "steps." + id + ".pool"
		var msg, fix string
		switch {
		case c == nil && s.Pool != "" && s.Pool != config.DefaultPool:
			msg, fix = fmt.Sprintf("step %s names pool %s but the factory has no serve.cluster: serve runs it itself", id, pool), "add serve.cluster (docs/cluster.md), or remove the pool"
		case c == nil || pool == config.DefaultPool && c.LocalWorker || offered[pool]:
			continue
		case allowed != nil && !allowed[pool] && !allowed["*"]:
			msg, fix = fmt.Sprintf("no enrolled worker may take pool %s (no join token allowed it): step %s's attempts would wait for one", pool, id),
				"make a token with kusaw cluster token --pool "+pool+" and join a worker with it (docs/cluster.md)"
		default:
			msg, fix = fmt.Sprintf("no worker has ever offered pool %s: step %s's attempts would wait for one", pool, id), "start a worker allowed pool "+pool+" with kusaw worker --pool "+pool+" (kusaw workers shows each worker's allowed pools)"
		}
		if s.Pool == "" {
			path = "steps." + id
		}
		pos := f.PosOf(path)
		out = append(out, config.Finding{Code: config.WCodePoolNeverOffered, Severity: config.SevWarning, Path: path, Line: pos.Line, Column: pos.Column, File: f.Path, Message: msg, Fix: fix})
	}
	return out
}

// toolchainChecks names (W15) each folder the Linux sandbox adds to a
// sandboxed step's view, read-only, because a program of the step's PATH
// lies in it (sandbox.Toolchains): the view is otherwise what the factory
// names. A folder allow_read already lists is not named again.
func (v *Validator) toolchainChecks(f *config.Factory) config.Findings {
	if v.GOOS != "linux" || v.Getenv == nil {
		return nil
	}
	var out config.Findings
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		sandboxed := false
		for _, repos := range f.Attempts(s) {
			if m, _ := f.EffectiveMode(s, repos); m == config.ModeRequired {
				sandboxed = true
			}
		}
		if !sandboxed {
			continue
		}
		path := v.Getenv("PATH")
		if e, ok := s.Env["PATH"]; ok && e.Secret == nil {
			path = e.Value
		}
		sp := "steps." + id
		pos := f.PosOf(sp)
		for _, tc := range sandbox.Toolchains(path, v.Getenv("HOME")) {
			listed := false
			for _, r := range f.AllowRead(s) {
				listed = listed || r == tc.Path || strings.HasPrefix(tc.Path, strings.TrimSuffix(r, "/")+"/")
			}
			if listed {
				continue
			}
			out = append(out, config.Finding{Code: config.WCodeToolchain, Severity: config.SevWarning, Path: sp, Line: pos.Line, Column: pos.Column, File: f.Path,
				Message: fmt.Sprintf("step %s: the sandbox shows %s read-only, the toolchain of %s on the step's PATH (%s)", id, tc.Path, tc.From, tc.Reason),
				Fix:     fmt.Sprintf("if that is the toolchain you mean, list it in steps.%s.sandbox.allow_read to say so; otherwise take %s off the PATH kusaw runs with", id, tc.From)})
		}
	}
	return out
}

// continueSessionChecks refuses continue_session where no session can be
// continued (E062): a step that runs no agent, a provider whose CLI keeps
// sessions per working folder (each attempt has a worktree of its own) or
// has none, or one that keeps them in its login folder where the sandbox
// gives each attempt a fresh HOME (macOS).
func continueSessionChecks(f *config.Factory, goos string) config.Findings {
	var out config.Findings
	var can []string
	for _, n := range providers.Names() {
		if p, _ := providers.Get(n); p.Spec().SessionByID {
			can = append(can, n)
		}
	}
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		if !s.ContinueSession {
			continue
		}
		path := "steps." + id + ".continue_session"
		var msg string
		if s.Kind() != config.KindAgent {
			msg = fmt.Sprintf("step %s is a %s step: continue_session continues an agent's session", id, s.Kind())
		} else if p, ok := providers.Of(f, s.Provider); ok && p.Spec().Resume == "" {
			msg = fmt.Sprintf("step %s: provider %s has no way kusaw knows to continue a session", id, s.Provider)
		} else if ok && !p.Spec().SessionByID {
			msg = fmt.Sprintf("step %s: provider %s keeps its sessions per working folder, and each attempt has a worktree of its own, so its session cannot be continued", id, s.Provider)
		} else if ok && len(p.Spec().LoginSessionDirs) > 0 {
			for _, repos := range f.Attempts(s) {
				if mode, _ := f.EffectiveMode(s, repos); providers.FreshHome(goos, mode == config.ModeRequired) {
					msg = fmt.Sprintf("step %s: provider %s keeps its sessions in its login folder, and on %s the sandbox gives each attempt a fresh HOME, so its session cannot be continued", id, s.Provider, goos)
					break
				}
			}
		}
		if msg != "" {
			pos := f.PosOf(path)
			out = append(out, config.Finding{Code: config.ECodeCapMissing, Severity: config.SevError, Path: path, Line: pos.Line, Column: pos.Column,
				Message: msg, Fix: "remove continue_session, or use a provider that continues a session by its id (" + strings.Join(can, ", ") + ")", File: f.Path})
		}
	}
	return out
}

// placeholderPromptChecks is W16: an agent step still asks for the prompt
// kusaw init wrote.
func placeholderPromptChecks(f *config.Factory) config.Findings {
	var out config.Findings
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		if s.Kind() != config.KindAgent || strings.TrimSpace(s.Prompt) != config.PlaceholderPrompt {
			continue
		}
		sp := "steps." + id + ".prompt"
		pos := f.PosOf(sp)
		out = append(out, config.Finding{Code: config.WCodePromptPlaceholder, Severity: config.SevWarning, Path: sp, Line: pos.Line, Column: pos.Column,
			Message: fmt.Sprintf("step %s's prompt is still init's placeholder (%q)", id, config.PlaceholderPrompt),
			Fix:     "write what the agent should do in steps." + id + ".prompt (or point prompt_file at a file)", File: f.Path})
	}
	return out
}
