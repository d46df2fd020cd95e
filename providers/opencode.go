package providers

import (
	"encoding/json"
	"fmt"
	"strings"
)

// opencode is sst's opencode (npm opencode-ai) in its headless run,
// `opencode run --format json`. It reaches the model through a provider
// of kusaw's own in its configuration (OPENCODE_CONFIG_CONTENT, an
// OpenAI-compatible API), so the base URL and key are the ones kusaw
// sets: the proxy's and, under inject, a placeholder. It is the
// description of docs/providers.md's worked example, built in: the same
// code runs it.
type opencode struct{ generic }

func init() { register(opencode{generic{opencodeDef}}) }

var opencodeDef = AgentDef{
	Name: "opencode",
	Argv: []string{"opencode", "run", "{sandbox_off}", "--pure", "--format=json", "--model=kusaw/{model}", "{prompt}"},
	// Its stream has no result line of its own: each model turn ends with
	// a step_finish; the last, reason stop, is the result.
	Format: "jsonl", ResultWhen: "/part/reason=stop", Session: "/sessionID",
	InputTokens: "/part/tokens/input", OutputTokens: "/part/tokens/output", CacheReadTokens: "/part/tokens/cache/read", CostUSD: "/part/cost",
	APIKeyEnv: "OPENAI_API_KEY", BaseURLEnv: "OPENAI_BASE_URL",
	// No update, model list, default plugins, sharing, LSP downloads or
	// Claude Code settings of the user's: what it runs is what kusaw
	// started.
	Env: []string{"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_CLAUDE_CODE=1"},
	LoginFolders: []string{"~/.local/share/opencode", "~/.local/state/opencode", "~/.config/opencode", "~/.cache/opencode"},
	EgressHosts:  []string{"api.openai.com"},
	// models.dev (its model list), opencode.ai (updates, sharing), the npm
	// registry (it asks about its provider's package and works on with the
	// one it brought).
	Handshake:      []string{"models.dev", "opencode.ai", "registry.npmjs.org"},
	SandboxOffArgs: []string{"--auto"},
	InjectHost:     "api.openai.com", InjectHeader: "Authorization", InjectUpstream: "https://api.openai.com/v1",
}

func (o opencode) Spec() Spec {
	s := o.generic.Spec()
	s.CheckedAgainst = "opencode 1.18.33 (npm opencode-ai): `opencode run --format json` against a local OpenAI chat-completions API; flags from `opencode run --help`"
	s.Install = "npm install -g opencode-ai; set providers.opencode.model to a model your OpenAI-compatible API serves (and base_url when it is not api.openai.com)"
	s.Recognize = func(line string) bool { return versionRE().MatchString(strings.TrimSpace(line)) }
	return s
}

// Argv needs a model: kusaw's provider in opencode's configuration lists
// the one model the step uses.
func (o opencode) Argv(req RunRequest) ([]string, error) {
	if req.Model == "" {
		return nil, fmt.Errorf("opencode: set providers.opencode.model (or the step's model param) to a model your API serves, e.g. gpt-5")
	}
	return o.generic.Argv(req)
}

// Env adds opencode's configuration: a provider named kusaw serving the
// step's model, its key from OPENAI_API_KEY and its base URL from
// OPENAI_BASE_URL when kusaw (inject) or the step sets it, else
// providers.opencode.base_url, else OpenAI's.
func (o opencode) Env(req RunRequest) []string {
	type provider struct {
		NPM     string                    `json:"npm"`
		Options map[string]string         `json:"options"`
		Models  map[string]map[string]any `json:"models"`
	}
	base := "{env:OPENAI_BASE_URL}" // opencode reads it at its start
	switch {
	case req.BaseURLFromEnv:
	case req.BaseURL != "":
		base = req.BaseURL
	default:
		base = "https://api.openai.com/v1"
	}
	cfg := map[string]any{"autoupdate": false, "share": "disabled", "provider": map[string]provider{"kusaw": {
		NPM:     "@ai-sdk/openai-compatible",
		Options: map[string]string{"baseURL": base, "apiKey": "{env:OPENAI_API_KEY}"},
		Models:  map[string]map[string]any{req.Model: {}},
	}}}
	b, _ := json.Marshal(cfg)
	return append(append([]string{}, o.generic.Env(req)...), "OPENCODE_CONFIG_CONTENT="+string(b))
}
