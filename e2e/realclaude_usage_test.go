package e2e

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/providers/providertest"
	"github.com/kusaw/kusaw/secretstore"
)

// Usage and limits with the real Claude Code (#15), in kusaw's sandbox
// with an allowlist (nothing leaves the machine), against the fake
// Messages API on the host's localhost: attempt.json holds the result's
// tokens and cost, run.json the sums, runs --json and show print them; a
// limits.tokens below one message's usage stops the attempt with
// limit_reached; a pipeline cost limit stops the run before its next step.
func TestRealClaudeCodeUsageAndLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real Claude Code")
	}
	needSandbox(t)
	bin, version := providertest.InstallClaude(t)
	t.Logf("Claude Code %s at %s", version, bin)
	api := providertest.NewMessagesAPI(t, "pong")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(api.URL, "http://"))
	factory := func(body string) string {
		dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {command: `+bin+`}
sandbox:
  mode: required
  network: allowlist
  egress:
    allow: ["localhost:`+port+`"]
`+body, "app")
		if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("anthropic.key", "sk-ant-e2e-usage-key-4711"); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stepEnv := `
    env:
      ANTHROPIC_API_KEY: {secret: anthropic.key}
      ANTHROPIC_BASE_URL: http://localhost:` + port + `
      DISABLE_TELEMETRY: "1"
      DISABLE_ERROR_REPORTING: "1"
`
	type usage struct {
		InputTokens  int64    `json:"input_tokens"`
		OutputTokens int64    `json:"output_tokens"`
		CostUSD      *float64 `json:"cost_usd"`
		Turns        int      `json:"turns"`
		Models       map[string]json.RawMessage
	}

	t.Run("recorded and summed", func(t *testing.T) {
		dir := factory(`pipelines:
  default: [ask]
steps:
  ask:
    prompt: reply with the word pong` + stepEnv)
		res := runKusaw(t, dir, "run")
		id := onlyRun(t, dir)
		adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "ask", "1")
		if res.code != 0 {
			t.Fatalf("kusaw run exit %d\n%s%s\nstderr.log: %s", res.code, res.stdout, res.stderr, readFile(t, filepath.Join(adir, "stderr.log")))
		}
		var a struct{ Usage *usage }
		json.Unmarshal([]byte(readFile(t, filepath.Join(adir, "attempt.json"))), &a)
		if a.Usage == nil || a.Usage.InputTokens < 10 || a.Usage.OutputTokens < 5 || a.Usage.CostUSD == nil || a.Usage.Turns < 1 || len(a.Usage.Models) == 0 {
			t.Fatalf("attempt.json usage: %+v", a.Usage)
		}
		var r struct {
			Usage *usage
			Steps []struct{ Usage *usage }
		}
		json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"))), &r)
		if r.Usage == nil || r.Usage.InputTokens != a.Usage.InputTokens || *r.Usage.CostUSD != *a.Usage.CostUSD || r.Steps[0].Usage == nil {
			t.Fatalf("run.json sums: %+v", r)
		}
		if out := runKusaw(t, dir, "runs", "--json"); !strings.Contains(out.stdout, `"input_tokens": `) {
			t.Errorf("runs --json:\n%s", out.stdout)
		}
		if out := runKusaw(t, dir, "show", id); !strings.Contains(out.stdout, "usage: $") {
			t.Errorf("show:\n%s", out.stdout)
		}
	})

	t.Run("step tokens limit", func(t *testing.T) {
		dir := factory(`pipelines:
  default: [ask]
steps:
  ask:
    prompt: reply with the word pong
    limits: {tokens: 5}` + stepEnv)
		res := runKusaw(t, dir, "run")
		if res.code != 1 {
			t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		a, _ := loadAttempt(t, dir, onlyRun(t, dir), "ask", 1)
		if a.Outcome != "failed" || a.Reason != "limit_reached" {
			t.Errorf("attempt %s/%s, want failed/limit_reached", a.Outcome, a.Reason)
		}
	})

	t.Run("pipeline cost limit", func(t *testing.T) {
		dir := factory(`pipelines:
  default:
    steps: [ask, again]
    limits: {cost_usd: 0.0000001}
steps:
  ask:
    prompt: reply with the word pong` + stepEnv + `  again:
    prompt: reply with the word pong` + stepEnv)
		res := runKusaw(t, dir, "run")
		if res.code != 1 || !strings.Contains(res.stderr, "limit_reached") {
			t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		id := onlyRun(t, dir)
		if _, ok := loadAttempt(t, dir, id, "again", 1); ok {
			t.Error("the next step ran after the run's cost limit was crossed")
		}
		if a, _ := loadAttempt(t, dir, id, "ask", 1); a.Outcome != "passed" {
			t.Errorf("the first step: %s/%s", a.Outcome, a.Reason)
		}
	})
}
