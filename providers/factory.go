package providers

import (
	"strings"

	"github.com/kusaw/kusaw/config"
)

// Of returns the provider a step of factory f names: a built-in one, or
// the agent f describes under providers.NAME.agent. An empty name is the
// default provider.
func Of(f *config.Factory, name string) (Provider, bool) {
	if name == "" {
		name = Default
	}
	if p, ok := Get(name); ok {
		return p, true
	}
	def := DefOf(f, name)
	if def == nil {
		return nil, false
	}
	p, err := NewAgent(*def)
	return p, err == nil
}

// DefOf is the AgentDef of an agent f describes (nil when f describes
// none by that name).
func DefOf(f *config.Factory, name string) *AgentDef {
	if f == nil {
		return nil
	}
	pc := f.Providers[name]
	if pc == nil || pc.Agent == nil {
		return nil
	}
	a := pc.Agent
	d := &AgentDef{Name: name, Command: pc.Command, Argv: a.Argv, Format: a.Format, ResultWhen: a.Result, Text: a.Text, Session: a.Session,
		InputTokens: a.InputTokens, OutputTokens: a.OutputTokens, CacheReadTokens: a.CacheReadTokens, CostUSD: a.CostUSD,
		APIKeyEnv: a.KeyEnv, BaseURLEnv: a.BaseURLEnv, LoginTokenEnv: a.LoginTokenEnv, Env: a.Env, LoginFolders: a.LoginFolders,
		EgressHosts: a.EgressHosts, Handshake: a.HandshakeHosts, SandboxOffArgs: a.SandboxOffArgs,
		InjectHost: a.InjectHost, InjectHeader: a.InjectHeader, InjectUpstream: a.InjectUpstream}
	d.Success, d.SuccessValue, _ = strings.Cut(a.Success, "=")
	return d
}
