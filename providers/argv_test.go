package providers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func mustGet(t *testing.T, name string) Provider {
	t.Helper()
	p, ok := Get(name)
	if !ok {
		t.Fatalf("provider %s not registered", name)
	}
	return p
}

func TestNamesAndDefault(t *testing.T) {
	if got := Names(); !reflect.DeepEqual(got, []string{"claude-code", "codex", "cursor", "gemini", "opencode"}) {
		t.Fatalf("Names() = %v", got)
	}
	if _, ok := Get(Default); !ok {
		t.Fatalf("default provider %q missing", Default)
	}
	if _, ok := Get("aider"); ok {
		t.Fatal("unknown provider found")
	}
}

func TestClaudeArgv(t *testing.T) {
	p := mustGet(t, "claude-code")
	tests := []struct {
		name string
		req  RunRequest
		want []string
	}{
		{"unsandboxed default", RunRequest{Prompt: "fix it"},
			[]string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits", "--", "fix it"}},
		{"sandboxed with extra dirs", RunRequest{Command: "/opt/claude", Prompt: "fix it", Sandboxed: true, ExtraDirs: []string{"/w/docs", "", "/w/api"}},
			[]string{"/opt/claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions",
				"--add-dir", "/w/docs", "--add-dir", "/w/api", "--settings", `{"sandbox":{"enabled":false}}`, "--", "fix it"}},
		{"user args kept, user permission wins", RunRequest{Prompt: "-x looks like a flag", Args: []string{"--model", "sonnet", "--permission-mode=dontAsk", "--verbose"}},
			[]string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--model", "sonnet", "--permission-mode=dontAsk", "--", "-x looks like a flag"}},
		{"skip-permissions counts as a permission flag", RunRequest{Prompt: "p", Args: []string{"--dangerously-skip-permissions"}},
			[]string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions", "--", "p"}},
		{"user settings merged with sandbox off", RunRequest{Prompt: "p", Sandboxed: true,
			Args:         []string{"--settings", `{"model":"opus","sandbox":{"enabled":true,"autoAllowBashIfSandboxed":true}}`},
			UserSettings: `{"env":{"A":"1"}}`},
			[]string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions",
				"--settings", `{"env":{"A":"1"},"model":"opus","sandbox":{"autoAllowBashIfSandboxed":true,"enabled":false}}`, "--", "p"}},
		{"user settings kept unsandboxed", RunRequest{Prompt: "p", Args: []string{`--settings={"model":"opus"}`}},
			[]string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits",
				"--settings", `{"model":"opus"}`, "--", "p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Argv(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("argv\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestClaudeSettingsFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(f, []byte(`{"permissions":{"allow":["Bash(go test:*)"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := mustGet(t, "claude-code").Argv(RunRequest{Prompt: "p", Sandboxed: true, UserSettings: f})
	if err != nil {
		t.Fatal(err)
	}
	i := indexOf(got, "--settings")
	if i < 0 {
		t.Fatalf("no --settings in %q", got)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got[i+1]), &m); err != nil {
		t.Fatal(err)
	}
	if m["sandbox"].(map[string]any)["enabled"] != false || m["permissions"] == nil {
		t.Fatalf("settings not merged: %s", got[i+1])
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func TestArgvErrors(t *testing.T) {
	tests := []struct {
		provider string
		req      RunRequest
		want     string
	}{
		{"claude-code", RunRequest{Prompt: "  "}, "empty prompt"},
		{"claude-code", RunRequest{Prompt: "a\x00b"}, "NUL"},
		{"claude-code", RunRequest{Prompt: strings.Repeat("x", MaxPromptBytes+1)}, "at most 120 KiB"},
		{"claude-code", RunRequest{Prompt: "p", Args: []string{"--output-format", "text"}}, "--output-format is set by kusaw"},
		{"claude-code", RunRequest{Prompt: "p", Args: []string{"-p"}}, "-p is set by kusaw"},
		{"claude-code", RunRequest{Prompt: "p", Args: []string{"--permission-mode", "yolo"}}, `--permission-mode "yolo" is not one of`},
		{"claude-code", RunRequest{Prompt: "p", Args: []string{"--settings"}}, "--settings needs a value"},
		{"claude-code", RunRequest{Prompt: "p", Args: []string{"--settings", "{not json"}}, "not a JSON object"},
		{"claude-code", RunRequest{Prompt: "p", UserSettings: "/nonexistent/settings.json"}, "cannot read settings file"},
		{"claude-code", RunRequest{Prompt: "p", Args: []string{"--"}}, "`--` is not allowed"},
		{"cursor", RunRequest{Prompt: "p", Args: []string{"--sandbox", "enabled"}}, "--sandbox is set by kusaw"},
		{"cursor", RunRequest{Prompt: "p", Args: []string{"--output-format=json"}}, "--output-format is set by kusaw"},
		{"cursor", RunRequest{Prompt: "p", Args: []string{"--api-key", "k"}}, "--secret"},
		{"cursor", RunRequest{Prompt: ""}, "empty prompt"},
	}
	for _, tc := range tests {
		_, err := mustGet(t, tc.provider).Argv(tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: err = %v, want it to mention %q", tc.provider, tc.req.Args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error is not one line: %q", err)
		}
	}
}

func TestCursorArgv(t *testing.T) {
	p := mustGet(t, "cursor")
	got, err := p.Argv(RunRequest{Prompt: "fix it", Args: []string{"--model", "gpt-5", "--force"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"agent", "-p", "--output-format", "stream-json", "--force", "--trust", "--model", "gpt-5", "--", "fix it"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("unsandboxed argv\n got %q\nwant %q", got, want)
	}
	got, err = p.Argv(RunRequest{Command: "/x/cursor-agent", Prompt: "fix it", Sandboxed: true, ExtraDirs: []string{"/w/docs"}})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"/x/cursor-agent", "-p", "--output-format", "stream-json", "--force", "--trust", "--sandbox", "disabled", "--add-dir", "/w/docs", "--", "fix it"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sandboxed argv\n got %q\nwant %q", got, want)
	}
}

func TestEnv(t *testing.T) {
	c := mustGet(t, "claude-code")
	if got := c.Env(RunRequest{}); !reflect.DeepEqual(got, []string{"DISABLE_AUTOUPDATER=1"}) {
		t.Fatalf("unsandboxed env %q", got)
	}
	got := c.Env(RunRequest{Sandboxed: true, Network: "allowlist"})
	want := []string{"DISABLE_AUTOUPDATER=1", "IS_SANDBOX=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sandboxed env %q", got)
	}
	if got := mustGet(t, "cursor").Env(RunRequest{Sandboxed: true}); len(got) != 0 {
		t.Fatalf("cursor env %q", got)
	}
}

func TestSpecs(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	c := mustGet(t, "claude-code").Spec()
	if got := c.LoginPaths("/home/u", getenv); !reflect.DeepEqual(got, []string{"/home/u/.claude", "/home/u/.claude.json"}) {
		t.Fatalf("claude login paths %q", got)
	}
	env["CLAUDE_CONFIG_DIR"] = "/cfg/claude/"
	if got := c.LoginPaths("/home/u", getenv); !reflect.DeepEqual(got, []string{"/cfg/claude"}) {
		t.Fatalf("claude login paths with CLAUDE_CONFIG_DIR %q", got)
	}
	if c.Inject == nil || c.Inject.Header != "x-api-key" || c.Inject.BaseURLEnv != "ANTHROPIC_BASE_URL" ||
		c.Inject.KeyEnv != "ANTHROPIC_API_KEY" || c.Inject.Upstream != "https://api.anthropic.com" ||
		c.Inject.SecretKey != "providers.claude-code.api_key" {
		t.Fatalf("claude inject spec %+v", c.Inject)
	}
	if !reflect.DeepEqual(c.EgressHosts, []string{"api.anthropic.com"}) {
		t.Fatalf("claude egress %q", c.EgressHosts)
	}
	for _, h := range c.HandshakeHosts {
		if h == "api.anthropic.com" {
			t.Fatal("the API host must not be a handshake host")
		}
	}
	cu := mustGet(t, "cursor").Spec()
	if cu.Inject != nil {
		t.Fatal("cursor cannot inject")
	}
	if !reflect.DeepEqual(cu.AltCommands, []string{"cursor-agent"}) || cu.DefaultCommand != "agent" {
		t.Fatalf("cursor commands %q %q", cu.DefaultCommand, cu.AltCommands)
	}
	env = map[string]string{}
	if got := cu.LoginPaths("/home/u", getenv); !reflect.DeepEqual(got, []string{"/home/u/.cursor", "/home/u/.config/cursor"}) {
		t.Fatalf("cursor login paths %q", got)
	}
	env["XDG_CONFIG_HOME"] = "/xdg"
	if got := cu.LoginPaths("/home/u", getenv); !reflect.DeepEqual(got, []string{"/home/u/.cursor", "/xdg/cursor"}) {
		t.Fatalf("cursor login paths with XDG %q", got)
	}
	env["CURSOR_CONFIG_DIR"] = "/c"
	// Project state stays under ~/.cursor unless CURSOR_DATA_DIR moves it.
	if got := cu.LoginPaths("/home/u", getenv); !reflect.DeepEqual(got, []string{"/c", "/home/u/.cursor", "/xdg/cursor"}) {
		t.Fatalf("cursor login paths with CURSOR_CONFIG_DIR %q", got)
	}
	env["CURSOR_DATA_DIR"] = "/d"
	if got := cu.LoginPaths("/home/u", getenv); !reflect.DeepEqual(got, []string{"/c", "/d", "/xdg/cursor"}) {
		t.Fatalf("cursor login paths with CURSOR_DATA_DIR %q", got)
	}
}
