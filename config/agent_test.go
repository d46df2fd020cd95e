package config

import (
	"path/filepath"
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
