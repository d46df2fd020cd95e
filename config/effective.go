package config

import (
	"net/url"
	"strings"
)

// Origins of an effective setting, for doctor and validate --json.
const (
	OriginFactory = "factory"
	OriginDefault = "default"
)

// Attempts returns the active repos of each attempt process of a step: one
// list with every active repo, or, with per_repo, one list per repo.
func (f *Factory) Attempts(s *Step) [][]string {
	repos := f.ActiveRepos(s)
	if !s.PerRepo {
		return [][]string{repos}
	}
	out := make([][]string, 0, len(repos))
	for _, r := range repos {
		out = append(out, []string{r})
	}
	return out
}

// EffectiveMode resolves the sandbox mode of one attempt (docs/architecture.md, "Effective sandbox mode"): the
// step's own setting; else required if any active repo requires it; else off
// if every active repo says off; else sandbox.mode. The origin says which
// rule decided: "step:<id>", "repo:<name>", "repos", or "factory".
func (f *Factory) EffectiveMode(s *Step, activeRepos []string) (Mode, string) {
	if s.Sandbox != nil && s.Sandbox.Mode != ModeUnset {
		return s.Sandbox.Mode, "step:" + s.ID
	}
	allOff := len(activeRepos) > 0
	for _, name := range activeRepos {
		r := f.Repos[name]
		if r == nil {
			allOff = false
			continue
		}
		if r.Sandbox == ModeRequired {
			return ModeRequired, "repo:" + name
		}
		if r.Sandbox != ModeOff {
			allOff = false
		}
	}
	if allOff {
		return ModeOff, "repos"
	}
	m := f.Sandbox.Mode
	if m == ModeUnset {
		m = ModeOff
	}
	return m, OriginFactory
}

// StepNetwork is the network the step asks for: its own, else the factory's.
func (f *Factory) StepNetwork(s *Step) Network {
	if s.Sandbox != nil && s.Sandbox.Network != NetworkUnset {
		return s.Sandbox.Network
	}
	if f.Sandbox.Network == NetworkUnset {
		return NetworkOpen
	}
	return f.Sandbox.Network
}

// EffectiveNetwork is the network an attempt really gets: allowlist needs
// the sandbox, so an attempt whose mode is off has an open network (W2).
func (f *Factory) EffectiveNetwork(s *Step, mode Mode) Network {
	n := f.StepNetwork(s)
	if mode != ModeRequired {
		return NetworkOpen
	}
	return n
}

// AllowedHost is one allowlist entry of an attempt with where it came from:
// "factory", "step:<id>" or "provider:<name>".
type AllowedHost struct {
	Pattern HostPattern
	Origin  string
	Path    string // key path in the file; empty for provider hosts
}

// Allowlist is the attempt's allowlist: the factory's egress.allow, the
// step's egress.allow and, with provider_hosts, the provider's egress hosts.
// A host listed twice keeps its first origin.
func (f *Factory) Allowlist(s *Step, providerHosts []string) []AllowedHost {
	var out []AllowedHost
	seen := map[string]bool{}
	addEntry := func(p HostPattern, origin, path string) {
		k := p.String()
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, AllowedHost{Pattern: p, Origin: origin, Path: path})
	}
	for _, e := range f.Sandbox.Egress.Allow {
		addEntry(e.Pattern, OriginFactory, e.Path)
	}
	if s.Sandbox != nil {
		for _, e := range s.Sandbox.Allow {
			addEntry(e.Pattern, "step:"+s.ID, e.Path)
		}
	}
	// Provider is set only for agent steps by the loader; kusaw sandbox exec
	// keeps it on the command it runs in an agent step's place.
	if f.Sandbox.Egress.ProviderHosts && s.Provider != "" {
		hosts := providerHosts
		// The provider's base_url is where its CLI goes: a gateway, a
		// self-hosted server or a local service (https://localhost:PORT).
		if pc := f.Providers[s.Provider]; pc != nil && pc.BaseURL != "" {
			if h := baseURLHost(pc.BaseURL); h != "" {
				hosts = append([]string{h}, hosts...)
			}
		}
		for _, h := range hosts {
			if p, err := ParseHostPattern(h); err == nil {
				addEntry(p, "provider:"+s.Provider, "")
			}
		}
	}
	return out
}

// baseURLHost is the allowlist entry of a base URL: its host, with the
// port when it is not the scheme's default.
func baseURLHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	host := u.Hostname()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" && !(u.Scheme == "https" && p == "443") && !(u.Scheme == "http" && p == "80") {
		return host + ":" + p
	}
	if _, ok := LoopbackHost(u.Hostname()); ok {
		if u.Scheme == "http" {
			return host + ":80"
		}
		return host + ":443"
	}
	return host
}

// AllowPolicyKey names the key a user changes to allow a host for a step,
// for the proxy's refusal line.
func AllowPolicyKey(stepID string) string {
	if stepID == "" || stepID[0] == '_' { // kusaw's own steps (sandbox exec)
		return "sandbox.egress.allow"
	}
	return "steps." + stepID + ".sandbox.egress.allow"
}

// Inject returns the step's inject entries: the step's own when it names
// egress.inject (an empty list turns the factory's off for it), else the
// factory's.
func (f *Factory) Inject(s *Step) []InjectEntry {
	if s.Sandbox != nil && s.Sandbox.InjectSet {
		return append([]InjectEntry{}, s.Sandbox.Inject...)
	}
	return append([]InjectEntry{}, f.Sandbox.Egress.Inject...)
}

// AllowRead and AllowWrite merge the factory's lists with the step's.
func (f *Factory) AllowRead(s *Step) []string {
	out := append([]string{}, f.Sandbox.AllowRead...)
	if s.Sandbox != nil {
		out = append(out, s.Sandbox.AllowRead...)
	}
	return out
}

func (f *Factory) AllowWrite(s *Step) []string {
	out := append([]string{}, f.Sandbox.AllowWrite...)
	if s.Sandbox != nil {
		out = append(out, s.Sandbox.AllowWrite...)
	}
	return out
}

// SandboxWritable lists the host folders some sandbox of this factory may
// write: the state folder (attempts, worktrees, private ref stores and
// object folders, default caches), every cache, and the allow_write of
// the factory and of every step. kusaw runs no program from them on the
// host (the agent CLI's --version probe refuses one there).
func (f *Factory) SandboxWritable() []string {
	out := []string{f.StateDir}
	out = append(out, f.Sandbox.AllowWrite...)
	for _, c := range f.Caches {
		out = append(out, c.Path)
	}
	for _, s := range f.Steps {
		if s.Sandbox != nil {
			out = append(out, s.Sandbox.AllowWrite...)
		}
		for _, c := range s.Caches {
			out = append(out, c.Path)
		}
	}
	return out
}
