package providers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/status"
)

// An agent described in the factory file, loaded by config and run
// through Of: its argv, env, inject and capabilities follow the file, and
// a CLI speaking the stream the pointers name passes with its usage.
func TestAgentFromFactory(t *testing.T) {
	dir := t.TempDir()
	cli := filepath.Join(dir, "qagent")
	// Prints its argv's prompt back and a result line shaped like Qwen
	// Code's; --version for the probe.
	script := `#!/bin/sh
[ "$1" = --version ] && { echo 0.9.1; exit 0; }
for a; do last=$a; done
prompt=$(cat "$last" 2>/dev/null || echo "$last")
echo '{"type":"system","subtype":"init","session_id":"q-1"}'
echo "{\"type\":\"assistant\",\"text\":\"$prompt $QAGENT_MODE\"}"
echo '{"type":"result","is_error":false,"result":"done","session_id":"q-1","usage":{"input_tokens":7,"output_tokens":3}}'
`
	if err := os.WriteFile(cli, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := `version: 1
pipelines:
  default: [a]
steps:
  a: {prompt: hello there, provider: qagent}
providers:
  qagent:
    command: ` + cli + `
    model: m-1
    agent:
      argv: [qagent, --out=jsonl, "--model={model}", "{prompt_file}"]
      stream:
        result: /type=result
        success: /is_error=false
        text: /result
        session: /session_id
        usage: {input_tokens: /usage/input_tokens, output_tokens: /usage/output_tokens}
      key_env: QAGENT_KEY
      base_url_env: QAGENT_BASE_URL
      env: {QAGENT_MODE: quiet}
      login_folders: [~/.qagent]
      egress_hosts: [api.qagent.example]
      handshake_hosts: [telemetry.qagent.example]
      sandbox_off_args: [--no-sandbox]
      inject: {host: api.qagent.example, header: Authorization, upstream: "https://api.qagent.example/v1"}
`
	f, fs := config.Parse([]byte(yaml), filepath.Join(dir, "factory.yaml"))
	if len(fs.Errors()) > 0 {
		t.Fatalf("findings: %v", fs)
	}
	p, ok := Of(f, "qagent")
	if !ok {
		t.Fatal("Of does not find the described agent")
	}
	if _, ok := Of(f, "aider"); ok {
		t.Fatal("Of found an agent the file does not describe")
	}
	if b, _ := Of(f, "codex"); b == nil || b.Name() != "codex" {
		t.Fatal("Of does not return the built-in provider")
	}
	spec := p.Spec()
	if spec.Inject == nil || spec.Inject.Upstream != "https://api.qagent.example/v1" || spec.Inject.KeyEnv != "QAGENT_KEY" || spec.Inject.SecretKey != "providers.qagent.api_key" {
		t.Fatalf("inject %+v", spec.Inject)
	}
	if got := spec.LoginPaths("/home/u", os.Getenv); len(got) != 1 || got[0] != "/home/u/.qagent" {
		t.Fatalf("login paths %q", got)
	}
	mx := MatrixOf(p, Mode{Sandboxed: true, Network: "allowlist", Inject: true})
	for c, want := range map[Capability]Level{CapInject: Supported, CapStreamEvents: Supported, CapCostReporting: Partial, CapResume: NotSupported} {
		if cell, _ := mx.Get(c); cell.Level != want {
			t.Errorf("%s: %s (%s), want %s", c, cell.Level, cell.Note, want)
		}
	}

	cfg := filepath.Join(dir, "attempt-provider")
	prep, err := Prepare(context.Background(), PrepareInput{Provider: "qagent", Agent: DefOf(f, "qagent"), Step: "a", Command: cli, Prompt: "hello there",
		Sandboxed: true, Network: "allowlist", Model: "m-1", ConfigDir: cfg})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--no-sandbox", "--out=jsonl", "--model=m-1", filepath.Join(cfg, "prompt.txt")}
	if strings.Join(prep.Argv[1:], " ") != strings.Join(want, " ") {
		t.Fatalf("argv %q, want %q after the command", prep.Argv, want)
	}
	if b, err := os.ReadFile(filepath.Join(cfg, "prompt.txt")); err != nil || string(b) != "hello there" {
		t.Fatalf("prompt file %q %v", b, err)
	}
	if strings.Join(prep.Env, " ") != "QAGENT_MODE=quiet" || prep.Provider.Name() != "qagent" {
		t.Fatalf("env %q provider %v", prep.Env, prep.Provider)
	}
	r := runAgent(t, prep.Provider, prep.Argv, dir, prep.Env...)
	if o, reason := prep.Provider.Outcome(r.res, r.code); o != status.OutcomePassed || reason != status.ReasonNone {
		t.Fatalf("outcome %s %s: %+v\n%s", o, reason, r.res, r.stdout)
	}
	if !strings.Contains(r.stdout, "hello there quiet") || r.res.SessionID != "q-1" || r.res.Usage == nil || r.res.Usage.InputTokens != 7 || r.res.Usage.OutputTokens != 3 {
		t.Fatalf("result %+v usage %+v\n%s", r.res, r.res.Usage, r.stdout)
	}
	// Without a model the --model={model} argument is left out; outside
	// kusaw's sandbox the CLI's own stays on.
	argv, err := p.Argv(RunRequest{Command: cli, Prompt: "x", PromptFile: "/p"})
	if err != nil || strings.Join(argv[1:], " ") != "--out=jsonl /p" {
		t.Fatalf("argv %q %v", argv, err)
	}
	// {sandbox_off} places the sandbox-off args (after a subcommand).
	sub, err := NewAgent(AgentDef{Name: "sub", Argv: []string{"x", "run", "{sandbox_off}", "{prompt}"}, Format: "text", SandboxOffArgs: []string{"--auto"}})
	if err != nil {
		t.Fatal(err)
	}
	if argv, _ := sub.Argv(RunRequest{Prompt: "p", Sandboxed: true}); strings.Join(argv, " ") != "x run --auto p" {
		t.Fatalf("sandboxed {sandbox_off}: %q", argv)
	}
	if argv, _ := sub.Argv(RunRequest{Prompt: "p"}); strings.Join(argv, " ") != "x run p" {
		t.Fatalf("unsandboxed {sandbox_off}: %q", argv)
	}
	// A prompt file needs the attempt's folder.
	if _, err := Prepare(context.Background(), PrepareInput{Provider: "qagent", Agent: DefOf(f, "qagent"), Command: cli, Prompt: "x"}); err == nil {
		t.Fatal("Prepare wrote no prompt file and did not say so")
	}
}
