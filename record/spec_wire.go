package record

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/kusaw/kusaw/config"
)

// The spec's step, policy and provider are wire types of their own: what
// serve and its workers exchange is named here, with JSON tags, never by
// the config structs' Go fields (renaming one in config/types.go must not
// change the protocol). Each is made from the config by one function
// (…Of) and turned back into the config's form for the attempt by
// AttemptSpec.Factory; testdata/spec.golden.json holds every field, so a
// change of the wire form is a visible diff (TestSpecGolden).

// SpecStep is the step as the attempt runs it: what it runs, its env,
// timeout, limits, ports and sandbox. Its repos are the spec's; its
// pipeline shape (retry, candidates, gate…) stays with serve.
type SpecStep struct {
	ID       string   `json:"id"`
	Provider string   `json:"provider,omitempty"` // agent steps
	Builtin  string   `json:"builtin,omitempty"`
	Run      []string `json:"run,omitempty"`
	// Prompt is the step's prompt, its prompt file read into it (the file
	// is a path of the machine that made the spec: it never travels).
	Prompt    string             `json:"prompt,omitempty"`
	TimeoutMS int64              `json:"timeout_ms,omitempty"`
	Env       map[string]SpecEnv `json:"env,omitempty"`
	EnvOrder  []string           `json:"env_order,omitempty"`
	Sandbox   *SpecStepSandbox   `json:"sandbox,omitempty"`
	Limits    *SpecLimits        `json:"limits,omitempty"`
	Ports     int                `json:"ports,omitempty"`
}

// SpecEnv is one env value: a literal, or a secret-store key (resolved
// only when the process starts, on the machine that runs it).
type SpecEnv struct {
	Value  string `json:"value,omitempty"`
	Secret string `json:"secret,omitempty"`
}

// SpecStepSandbox is the step's own sandbox section.
type SpecStepSandbox struct {
	Mode       config.Mode    `json:"mode,omitempty"`
	Network    config.Network `json:"network,omitempty"`
	AllowRead  []string       `json:"allow_read,omitempty"`
	AllowWrite []string       `json:"allow_write,omitempty"`
	Allow      []SpecHost     `json:"allow,omitempty"`
	Inject     []SpecInject   `json:"inject,omitempty"`
	// InjectSet: the step names its inject entries itself (even none),
	// replacing the factory's.
	InjectSet bool           `json:"inject_set,omitempty"`
	Resources *SpecResources `json:"resources,omitempty"`
}

// SpecHost is one allowlist entry: its pattern as kusaw writes it, and
// its key path in the factory file (for messages).
type SpecHost struct {
	Host string `json:"host"`
	Path string `json:"path,omitempty"`
}

// SpecInject is one inject rule; Provider names the step's provider's
// own.
type SpecInject struct {
	Provider   bool   `json:"provider,omitempty"`
	Host       string `json:"host,omitempty"`
	Header     string `json:"header,omitempty"`
	Secret     string `json:"secret,omitempty"`
	BaseURL    string `json:"base_url,omitempty"`
	BaseURLEnv string `json:"base_url_env,omitempty"`
	KeyEnv     string `json:"key_env,omitempty"`
}

// SpecResources bound the attempt's processes; zero is kusaw's default.
type SpecResources struct {
	Pids   int   `json:"pids,omitempty"`
	Memory int64 `json:"memory,omitempty"`
	CPU    int   `json:"cpu,omitempty"`
	Disk   int64 `json:"disk,omitempty"`
	Output int64 `json:"output,omitempty"`
}

// SpecLimits are the step's limits (steps.<id>.limits).
type SpecLimits struct {
	CostUSD    float64 `json:"cost_usd,omitempty"`
	Tokens     int64   `json:"tokens,omitempty"`
	Turns      int     `json:"turns,omitempty"`
	DurationMS int64   `json:"duration_ms,omitempty"`
}

// SpecPolicy is the factory's sandbox policy. allow_read and allow_write
// name toolchain paths of the machine that runs the attempt.
type SpecPolicy struct {
	Mode                    config.Mode    `json:"mode,omitempty"`
	Network                 config.Network `json:"network,omitempty"`
	AllowRead               []string       `json:"allow_read,omitempty"`
	AllowWrite              []string       `json:"allow_write,omitempty"`
	Egress                  SpecEgress     `json:"egress"`
	Resources               SpecResources  `json:"resources"`
	SettingsScriptsWritable []string       `json:"settings_scripts_writable,omitempty"`
}

// SpecEgress is the proxy policy.
type SpecEgress struct {
	Allow           []SpecHost    `json:"allow,omitempty"`
	ProviderHosts   bool          `json:"provider_hosts,omitempty"`
	Inject          []SpecInject  `json:"inject,omitempty"`
	AllowRanges     []string      `json:"allow_ranges,omitempty"`
	Resolver        string        `json:"resolver,omitempty"`
	Budgets         SpecBudgets   `json:"budgets"`
	UpstreamProxy   *SpecUpstream `json:"upstream_proxy,omitempty"`
	UpstreamNoProxy []SpecHost    `json:"upstream_no_proxy,omitempty"`
}

// SpecBudgets are egress byte limits; zero is none.
type SpecBudgets struct {
	Enabled bool  `json:"enabled,omitempty"`
	PerHost int64 `json:"per_host,omitempty"`
	Total   int64 `json:"total,omitempty"`
}

// SpecUpstream is sandbox.egress.upstream_proxy; its credentials a
// secret-store key.
type SpecUpstream struct {
	URL         string `json:"url"`
	Credentials string `json:"credentials,omitempty"`
}

// SpecProvider is the step's provider configuration (agent steps).
type SpecProvider struct {
	Command     string   `json:"command,omitempty"`
	Args        []string `json:"args,omitempty"`
	ExitGraceMS int64    `json:"exit_grace_ms,omitempty"`
	BaseURL     string   `json:"base_url,omitempty"`
	CAFile      string   `json:"ca_file,omitempty"`
	CAPEM       string   `json:"ca_pem,omitempty"`  // CAFile's certificates (public)
	APIKey      string   `json:"api_key,omitempty"` // a secret-store key
	Model       string   `json:"model,omitempty"`
	// Agent is the provider's description when the factory describes
	// it (providers.NAME.agent): a worker runs it without the file.
	Agent *SpecAgent `json:"agent,omitempty"`
}

// SpecAgent is providers.NAME.agent on the wire.
type SpecAgent struct {
	Argv            []string `json:"argv"`
	Format          string   `json:"format"`
	Result          string   `json:"result,omitempty"`
	Success         string   `json:"success,omitempty"`
	Text            string   `json:"text,omitempty"`
	Session         string   `json:"session,omitempty"`
	InputTokens     string   `json:"input_tokens,omitempty"`
	OutputTokens    string   `json:"output_tokens,omitempty"`
	CacheReadTokens string   `json:"cache_read_tokens,omitempty"`
	CostUSD         string   `json:"cost_usd,omitempty"`
	KeyEnv          string   `json:"key_env,omitempty"`
	BaseURLEnv      string   `json:"base_url_env,omitempty"`
	LoginTokenEnv   []string `json:"login_token_env,omitempty"`
	Env             []string `json:"env,omitempty"` // NAME=value, never a secret (the loader refuses one)
	LoginFolders    []string `json:"login_folders,omitempty"`
	EgressHosts     []string `json:"egress_hosts,omitempty"`
	HandshakeHosts  []string `json:"handshake_hosts,omitempty"`
	SandboxOffArgs  []string `json:"sandbox_off_args,omitempty"`
	InjectHost      string   `json:"inject_host,omitempty"`
	InjectHeader    string   `json:"inject_header,omitempty"`
	InjectUpstream  string   `json:"inject_upstream,omitempty"`
}

func ms(d time.Duration) int64   { return d.Milliseconds() }
func dur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
func secretKey(r *config.SecretRef) string {
	if r == nil {
		return ""
	}
	return r.Key
}
func secretRef(k string) *config.SecretRef {
	if k == "" {
		return nil
	}
	return &config.SecretRef{Key: k}
}

// StepOf is the wire form of step s, its prompt given (the prompt file
// read by the caller, once).
func StepOf(s *config.Step, prompt string) SpecStep {
	w := SpecStep{ID: s.ID, Provider: s.Provider, Builtin: s.Builtin, Run: s.Run, Prompt: prompt, TimeoutMS: ms(s.Timeout),
		EnvOrder: s.EnvOrder, Ports: s.Ports}
	if len(s.Env) > 0 {
		w.Env = map[string]SpecEnv{}
		for k, v := range s.Env {
			w.Env[k] = SpecEnv{Value: v.Value, Secret: secretKey(v.Secret)}
		}
	}
	if l := s.Limits; l != nil {
		w.Limits = &SpecLimits{CostUSD: l.CostUSD, Tokens: l.Tokens, Turns: l.Turns, DurationMS: ms(l.Duration)}
	}
	if sb := s.Sandbox; sb != nil {
		w.Sandbox = &SpecStepSandbox{Mode: sb.Mode, Network: sb.Network, AllowRead: sb.AllowRead, AllowWrite: sb.AllowWrite,
			Allow: hostsOf(sb.Allow), Inject: injectsOf(sb.Inject), InjectSet: sb.InjectSet}
		if r := sb.Resources; r != nil {
			rs := resourcesOf(*r)
			w.Sandbox.Resources = &rs
		}
	}
	return w
}

// PolicyOf is the wire form of the factory's sandbox policy.
func PolicyOf(p config.SandboxPolicy) SpecPolicy {
	e := p.Egress
	w := SpecPolicy{Mode: p.Mode, Network: p.Network, AllowRead: p.AllowRead, AllowWrite: p.AllowWrite, Resources: resourcesOf(p.Resources),
		SettingsScriptsWritable: p.SettingsScriptsWritable,
		Egress: SpecEgress{Allow: hostsOf(e.Allow), ProviderHosts: e.ProviderHosts, Inject: injectsOf(e.Inject), Resolver: e.Resolver,
			Budgets: SpecBudgets{Enabled: e.Budgets.Enabled, PerHost: e.Budgets.PerHost, Total: e.Budgets.Total}, UpstreamNoProxy: hostsOf(e.UpstreamNoProxy)}}
	for _, r := range e.AllowRanges {
		w.Egress.AllowRanges = append(w.Egress.AllowRanges, r.String())
	}
	if u := e.UpstreamProxy; u != nil {
		w.Egress.UpstreamProxy = &SpecUpstream{URL: u.URL, Credentials: secretKey(u.Credentials)}
	}
	return w
}

// ProviderOf is the wire form of a provider's configuration.
func ProviderOf(p *config.ProviderConfig) *SpecProvider {
	if p == nil {
		return nil
	}
	sp := &SpecProvider{Command: p.Command, Args: p.Args, ExitGraceMS: ms(p.ExitGrace), BaseURL: p.BaseURL, CAFile: p.CAFile, CAPEM: string(p.CAPEM), APIKey: secretKey(p.APIKey), Model: p.Model}
	if a := p.Agent; a != nil {
		sp.Agent = &SpecAgent{Argv: a.Argv, Format: a.Format, Result: a.Result, Success: a.Success, Text: a.Text, Session: a.Session,
			InputTokens: a.InputTokens, OutputTokens: a.OutputTokens, CacheReadTokens: a.CacheReadTokens, CostUSD: a.CostUSD,
			KeyEnv: a.KeyEnv, BaseURLEnv: a.BaseURLEnv, LoginTokenEnv: a.LoginTokenEnv, Env: a.Env, LoginFolders: a.LoginFolders,
			EgressHosts: a.EgressHosts, HandshakeHosts: a.HandshakeHosts, SandboxOffArgs: a.SandboxOffArgs,
			InjectHost: a.InjectHost, InjectHeader: a.InjectHeader, InjectUpstream: a.InjectUpstream}
	}
	return sp
}

func hostsOf(hs []config.HostEntry) []SpecHost {
	var out []SpecHost
	for _, h := range hs {
		out = append(out, SpecHost{Host: h.Pattern.String(), Path: h.Path})
	}
	return out
}

func injectsOf(in []config.InjectEntry) []SpecInject {
	var out []SpecInject
	for _, e := range in {
		out = append(out, SpecInject{Provider: e.Provider, Host: e.Host, Header: e.Header, Secret: e.Secret, BaseURL: e.BaseURL, BaseURLEnv: e.BaseURLEnv, KeyEnv: e.KeyEnv})
	}
	return out
}

func resourcesOf(r config.Resources) SpecResources {
	return SpecResources{Pids: r.Pids, Memory: r.Memory, CPU: r.CPU, Disk: r.Disk, Output: r.Output}
}

// The config's form again, for the attempt (AttemptSpec.Factory).

func (w SpecStep) config(repos []string) *config.Step {
	s := &config.Step{ID: w.ID, Provider: w.Provider, Builtin: w.Builtin, Run: w.Run, Prompt: w.Prompt, Repos: repos, Attempts: 1,
		Timeout: dur(w.TimeoutMS), EnvOrder: w.EnvOrder, Ports: w.Ports}
	if len(w.Env) > 0 {
		s.Env = map[string]config.EnvValue{}
		for k, v := range w.Env {
			s.Env[k] = config.EnvValue{Value: v.Value, Secret: secretRef(v.Secret)}
		}
	}
	if l := w.Limits; l != nil {
		s.Limits = &config.Limits{CostUSD: l.CostUSD, Tokens: l.Tokens, Turns: l.Turns, Duration: dur(l.DurationMS)}
	}
	if sb := w.Sandbox; sb != nil {
		s.Sandbox = &config.StepSandbox{Mode: sb.Mode, Network: sb.Network, AllowRead: sb.AllowRead, AllowWrite: sb.AllowWrite,
			Allow: hostEntries(sb.Allow), Inject: injectEntries(sb.Inject), InjectSet: sb.InjectSet}
		if r := sb.Resources; r != nil {
			rs := r.config()
			s.Sandbox.Resources = &rs
		}
	}
	return s
}

func (w SpecPolicy) config() config.SandboxPolicy {
	e := w.Egress
	p := config.SandboxPolicy{Mode: w.Mode, Network: w.Network, AllowRead: w.AllowRead, AllowWrite: w.AllowWrite, Resources: w.Resources.config(),
		SettingsScriptsWritable: w.SettingsScriptsWritable,
		Egress: config.Egress{Allow: hostEntries(e.Allow), ProviderHosts: e.ProviderHosts, Inject: injectEntries(e.Inject), Resolver: e.Resolver,
			Budgets: config.Budgets{Enabled: e.Budgets.Enabled, PerHost: e.Budgets.PerHost, Total: e.Budgets.Total}, UpstreamNoProxy: hostEntries(e.UpstreamNoProxy)}}
	for _, r := range e.AllowRanges {
		if pr, err := netip.ParsePrefix(r); err == nil { // checked by Check
			p.Egress.AllowRanges = append(p.Egress.AllowRanges, pr)
		}
	}
	if u := e.UpstreamProxy; u != nil {
		p.Egress.UpstreamProxy = &config.UpstreamProxy{URL: u.URL, Credentials: secretRef(u.Credentials)}
	}
	return p
}

func (w *SpecProvider) config() *config.ProviderConfig {
	pc := &config.ProviderConfig{Command: w.Command, Args: w.Args, ExitGrace: dur(w.ExitGraceMS), BaseURL: w.BaseURL, CAFile: w.CAFile, CAPEM: pemBytes(w.CAPEM), APIKey: secretRef(w.APIKey), Model: w.Model}
	if a := w.Agent; a != nil {
		pc.Agent = &config.Agent{Argv: a.Argv, Format: a.Format, Result: a.Result, Success: a.Success, Text: a.Text, Session: a.Session,
			InputTokens: a.InputTokens, OutputTokens: a.OutputTokens, CacheReadTokens: a.CacheReadTokens, CostUSD: a.CostUSD,
			KeyEnv: a.KeyEnv, BaseURLEnv: a.BaseURLEnv, LoginTokenEnv: a.LoginTokenEnv, Env: a.Env, LoginFolders: a.LoginFolders,
			EgressHosts: a.EgressHosts, HandshakeHosts: a.HandshakeHosts, SandboxOffArgs: a.SandboxOffArgs,
			InjectHost: a.InjectHost, InjectHeader: a.InjectHeader, InjectUpstream: a.InjectUpstream}
	}
	return pc
}

func (r SpecResources) config() config.Resources {
	return config.Resources{Pids: r.Pids, Memory: r.Memory, CPU: r.CPU, Disk: r.Disk, Output: r.Output}
}

func hostEntries(hs []SpecHost) []config.HostEntry {
	var out []config.HostEntry
	for _, h := range hs {
		if p, err := config.ParseHostPattern(h.Host); err == nil { // checked by Check
			out = append(out, config.HostEntry{Raw: h.Host, Pattern: p, Path: h.Path})
		}
	}
	return out
}

func injectEntries(in []SpecInject) []config.InjectEntry {
	var out []config.InjectEntry
	for _, e := range in {
		out = append(out, config.InjectEntry{Provider: e.Provider, Host: e.Host, Header: e.Header, Secret: e.Secret, BaseURL: e.BaseURL, BaseURLEnv: e.BaseURLEnv, KeyEnv: e.KeyEnv})
	}
	return out
}

// checkWire refuses host entries and address ranges this kusaw cannot
// read: the attempt would run with a narrower (or wider) policy than
// serve meant.
func (s *AttemptSpec) checkWire() error {
	var hosts []SpecHost
	hosts = append(hosts, s.Policy.Egress.Allow...)
	hosts = append(hosts, s.Policy.Egress.UpstreamNoProxy...)
	if sb := s.StepConfig.Sandbox; sb != nil {
		hosts = append(hosts, sb.Allow...)
	}
	for _, h := range hosts {
		if _, err := config.ParseHostPattern(h.Host); err != nil {
			return fmt.Errorf("attempt spec host %q: %v", h.Host, err)
		}
	}
	for _, r := range s.Policy.Egress.AllowRanges {
		if _, err := netip.ParsePrefix(r); err != nil {
			return fmt.Errorf("attempt spec allow_ranges %q: %v", r, err)
		}
	}
	if p := s.Provider; p != nil && p.Agent != nil {
		// The machine that runs the attempt mounts these read/write: the
		// loader's rule holds for a spec that never saw a file.
		for _, lf := range p.Agent.LoginFolders {
			if err := config.CheckLoginFolder(lf); err != nil {
				return fmt.Errorf("attempt spec agent login folder: %v", err)
			}
		}
		for _, h := range append(append([]string(nil), p.Agent.EgressHosts...), p.Agent.HandshakeHosts...) {
			if _, err := config.ParseHostPattern(h); err != nil {
				return fmt.Errorf("attempt spec agent host %q: %v", h, err)
			}
		}
	}
	return nil
}

func pemBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
