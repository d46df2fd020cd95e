package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// A login folder is mounted read/write into the sandbox: only the CLI's
// own folder under the home passes.
func TestCheckLoginFolder(t *testing.T) {
	for _, ok := range []string{"~/.qwen", "~/.config/opencode", "~/.local/share/opencode", "~/Library/Application Support/qwen"} {
		if err := CheckLoginFolder(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"/etc/qwen", "~", "~/", "~/..", "~/../other", "~/.ssh", "~/.ssh/keys", "~/.config", "~/.config/gh", "~/.aws/creds", "~/.claude", "~/.codex", "~/.bashrc", "~/.local/share/kusaw", "qwen"} {
		if err := CheckLoginFolder(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// A described agent is a provider steps and candidates may name, and
// kusaw config set may store its key; an undescribed name is still
// unknown.
func TestAgentProviderNames(t *testing.T) {
	f, fs := Parse([]byte(`version: 1
pipelines:
  default: [a]
steps:
  a:
    prompt: hi
    candidates: [{provider: qwen}, {provider: codex}]
providers:
  qwen:
    agent: {argv: [qwen, "{prompt}"], stream: {format: text}}
`), filepath.Join(t.TempDir(), "factory.yaml"))
	if len(fs.Errors()) > 0 {
		t.Fatalf("findings: %v", fs)
	}
	if a := f.Providers["qwen"].Agent; a == nil || a.Format != AgentText || len(a.Argv) != 2 {
		t.Fatalf("agent %+v", a)
	}
	if !f.KnowsProvider("qwen") || f.KnowsProvider("aider") {
		t.Fatal("KnowsProvider")
	}
	names := func(string) []string { return []string{"qwen"} }
	if ok, err := SecretField("providers.qwen.api_key", names); !ok || err != nil {
		t.Fatalf("providers.qwen.api_key: %v %v", ok, err)
	}
	if _, err := SecretField("providers.aider.api_key", names); err == nil {
		t.Fatal("providers.aider.api_key accepted")
	}
}

// opencode has no model of its own kusaw could fall back on: validation
// refuses an agent step on it without providers.opencode.model (E052,
// naming the key and an example), as a step or as a candidate; the twin
// with the model set passes, and a factory that only configures opencode
// without running it is not refused.
func TestOpencodeNeedsModel(t *testing.T) {
	for name, src := range map[string]string{
		"step":      "steps:\n  a: {prompt: hi, provider: opencode}\n",
		"block":     "steps:\n  a: {prompt: hi, provider: opencode}\nproviders:\n  opencode: {base_url: \"https://api.example.com/v1\"}\n",
		"candidate": "steps:\n  a: {prompt: hi, candidates: [{provider: claude-code}, {provider: opencode}]}\n",
	} {
		_, fs := Parse([]byte("version: 1\npipelines:\n  default: [a]\n"+src), filepath.Join(t.TempDir(), "factory.yaml"))
		errs := fs.Errors()
		if len(errs) != 1 || errs[0].Code != ECodeProviderModel || errs[0].Path != "providers.opencode.model" || !strings.Contains(errs[0].Fix, "providers.opencode: {model: gpt-5}") {
			t.Errorf("%s: findings %v", name, fs)
		}
	}
	for name, src := range map[string]string{
		"model set": "steps:\n  a: {prompt: hi, provider: opencode}\nproviders:\n  opencode: {model: gpt-5}\n",
		"not run":   "steps:\n  a: {prompt: hi}\nproviders:\n  opencode: {base_url: \"https://api.example.com/v1\"}\n",
	} {
		if _, fs := Parse([]byte("version: 1\npipelines:\n  default: [a]\n"+src), filepath.Join(t.TempDir(), "factory.yaml")); len(fs.Errors()) > 0 {
			t.Errorf("%s: refused: %v", name, fs)
		}
	}
}
