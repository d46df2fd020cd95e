package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kusaw/kusaw/secretstore"
)

// providerFactory makes a factory whose claude-code and cursor are the
// fakes, both signing in with a secret from the store.
func providerFactory(t *testing.T, body string) string {
	f := buildFakes(t)
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {command: `+f.Claude+`, exit_grace: 1s}
  cursor: {command: `+f.Cursor+`, exit_grace: 1s}
`+body, "app")
	st := secretstore.OpenDir(filepath.Join(dir, "secrets"))
	if err := st.Set("agent.token", "fake-oauth-token-1234"); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("cursor.key", "fake-cursor-key-5678"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// processesWith lists the pids whose argv holds marker.
func processesWith(marker string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// An agent that prints its result and then does not exit (Cursor's print
// mode does this) is judged by its result once its exit grace is over:
// the step passes (or fails with the result's reason) long before its
// timeout, and nothing of it is left running. Without the fix the step
// runs into its 3-minute timeout and is recorded timed_out.
func TestAgentThatHangsAfterItsResult(t *testing.T) {
	cases := []struct {
		provider, scenario, outcome, reason string
		code                                int
	}{
		{"claude-code", "hang_after_result", "passed", "", 0},
		{"cursor", "hang_after_result", "passed", "", 0},
		{"claude-code", "error_then_hang", "failed", "provider.error", 1},
		{"cursor", "error_then_hang", "failed", "provider.error", 1},
	}
	for _, c := range cases {
		for _, mode := range []string{"off", "required"} {
			t.Run(c.provider+"/"+c.scenario+"/"+mode, func(t *testing.T) {
				if mode == "required" {
					needSandbox(t)
				}
				marker := fmt.Sprintf("kusaw-hang-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
				dir := providerFactory(t, `pipelines:
  default: [agent]
steps:
  agent:
    provider: `+c.provider+`
    prompt: do it
    timeout: 3m
    sandbox: `+mode+`
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      CURSOR_API_KEY: {secret: cursor.key}
      FAKE_AGENT_SCENARIO: `+c.scenario+`
      FAKE_AGENT_SLEEP: 10m
      FAKE_AGENT_MARKER: `+marker+`
`)
				res := runKusaw(t, dir, "run")
				if res.code != c.code {
					t.Fatalf("kusaw run exit %d, want %d\n%s%s", res.code, c.code, res.stdout, res.stderr)
				}
				id := onlyRun(t, dir)
				a, _ := loadAttempt(t, dir, id, "agent", 1)
				if a.Outcome != c.outcome || a.Reason != c.reason {
					t.Errorf("outcome %s/%s, want %s/%s\n%s", a.Outcome, a.Reason, c.outcome, c.reason, readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "agent", "1", "events.jsonl")))
				}
				events := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "agent", "1", "events.jsonl"))
				if !strings.Contains(events, `"type":"process.stopped_after_result"`) {
					t.Errorf("no event says the process had to be stopped")
				}
				if left := processesWith(marker); len(left) > 0 {
					t.Errorf("processes left behind: %v", left)
				}
			})
		}
	}
}

// A result followed by its own non-zero exit (no hang) stays failed as
// before; two results fail with provider.multiple_results.
func TestAgentResultEdgeCases(t *testing.T) {
	for _, c := range []struct{ scenario, reason string }{
		{"success_then_exit1", "provider.exit_after_success"},
		{"two_results", "provider.multiple_results"},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			dir := providerFactory(t, `pipelines:
  default: [agent]
steps:
  agent:
    prompt: do it
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: `+c.scenario+`
`)
			res := runKusaw(t, dir, "run")
			if res.code != 1 {
				t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			a, _ := loadAttempt(t, dir, onlyRun(t, dir), "agent", 1)
			if a.Outcome != "failed" || a.Reason != c.reason {
				t.Errorf("outcome %s/%s, want failed/%s", a.Outcome, a.Reason, c.reason)
			}
		})
	}
}

// A sandboxed Cursor step under an allowlist gets a per-attempt
// cli-config.json with HTTP/1.1 for agent traffic, so its agent stream
// goes through the egress proxy (the fake, like the real CLI, ignores
// HTTPS_PROXY for that stream otherwise and cannot leave the sandbox).
// The user's own Cursor config is not changed, the other worktree is
// passed with --add-dir, and the result's usage lands in attempt.json.
func TestCursorUnderAllowlist(t *testing.T) {
	needSandbox(t)
	var hits atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("{}"))
	}))
	defer api.Close()
	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())
	f := buildFakes(t)
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
  docs: {path: ./docs}
providers:
  cursor: {command: `+f.Cursor+`}
sandbox:
  egress:
    allow: ["localhost:`+port+`"]
pipelines:
  default: [edit]
steps:
  edit:
    provider: cursor
    prompt: Write NOTES.md.
    repos: [app, docs]
    sandbox: {mode: required, network: allowlist}
    env:
      CURSOR_API_KEY: {secret: cursor.key}
      CURSOR_API_ENDPOINT: http://localhost:`+port+`
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: NOTES.md
`, "app", "docs")
	if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("cursor.key", "fake-cursor-key-5678"); err != nil {
		t.Fatal(err)
	}
	// The user's own config, in the test's HOME (see testEnv).
	userCfg := filepath.Join(dir, "home", ".cursor", "cli-config.json")
	own := `{"version":1,"editor":{"vimMode":true},"permissions":{"allow":[],"deny":[]}}`
	writeFile(t, userCfg, own)

	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if hits.Load() == 0 {
		t.Fatal("the agent stream never reached the API through the proxy")
	}
	if got := readFile(t, userCfg); got != own {
		t.Fatalf("the user's cli-config.json changed:\n%s", got)
	}
	id := onlyRun(t, dir)
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "edit", "1")
	if log := readFile(t, filepath.Join(adir, "egress.log")); !strings.Contains(log, "localhost:"+port) {
		t.Errorf("egress.log has no line for the API host:\n%s", log)
	}
	var rec struct {
		Usage *struct {
			InputTokens  int64    `json:"input_tokens"`
			OutputTokens int64    `json:"output_tokens"`
			CostUSD      *float64 `json:"cost_usd"`
		} `json:"usage"`
		Processes []struct {
			Argv []string          `json:"argv"`
			Env  map[string]string `json:"env"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(adir, "attempt.json"))), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Usage == nil || rec.Usage.InputTokens == 0 || rec.Usage.OutputTokens == 0 || rec.Usage.CostUSD != nil {
		t.Errorf("attempt.json usage: %+v (want tokens, no cost)", rec.Usage)
	}
	argv := strings.Join(rec.Processes[0].Argv, " ")
	if !strings.Contains(argv, "--add-dir "+filepath.Join(adir, "worktrees", "docs")) {
		t.Errorf("the other worktree is not passed: %s", argv)
	}
	events := readFile(t, filepath.Join(adir, "events.jsonl"))
	if !strings.Contains(events, `"type":"provider.config"`) {
		t.Errorf("no provider.config event")
	}
}

// The twin that shows the test above can fail: without the HTTP/1.1
// setting the fake Cursor does not use HTTPS_PROXY for its agent stream
// (it dials the endpoint itself), as the real CLI's HTTP/2 stream does.
func TestCursorFakeIgnoresProxyWithoutHTTP1(t *testing.T) {
	f := buildFakes(t)
	var viaProxy atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		viaProxy.Add(1)
		w.Write([]byte("{}"))
	}))
	defer proxy.Close()
	home := t.TempDir()
	run := func() error {
		cmd := exec.Command(f.Cursor, "-p", "--trust", "--output-format", "stream-json", "--", "hi")
		cmd.Dir = home
		// An endpoint nothing listens on: only the proxy can answer.
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "CURSOR_API_KEY=k", "CURSOR_API_ENDPOINT=http://kusaw-test.invalid:1", "HTTPS_PROXY=" + proxy.URL}
		return cmd.Run()
	}
	if err := run(); err == nil || viaProxy.Load() != 0 {
		t.Fatalf("without HTTP/1.1 the agent stream went through the proxy: err %v, proxy hits %d", err, viaProxy.Load())
	}
	writeFile(t, filepath.Join(home, ".cursor", "cli-config.json"), `{"version":1,"network":{"useHttp1ForAgent":true}}`)
	if err := run(); err != nil || viaProxy.Load() != 1 {
		t.Fatalf("with HTTP/1.1 the agent stream did not use the proxy: err %v, proxy hits %d", err, viaProxy.Load())
	}
}

// Usage and limits (#15): a step's tokens limit below one turn's usage
// stops the attempt with limit_reached while the agent still works; a
// pipeline's cost limit stops the run before its next step; the sums are
// in run.json and shown by runs, show and usage.
func TestUsageAndLimits(t *testing.T) {
	t.Run("step tokens", func(t *testing.T) {
		marker := fmt.Sprintf("kusaw-limit-%d", os.Getpid())
		dir := providerFactory(t, `pipelines:
  default: [agent]
steps:
  agent:
    prompt: do it
    timeout: 3m
    limits: {tokens: 1000}
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: sleep
      FAKE_AGENT_SLEEP: 10m
      FAKE_AGENT_TOKENS: "5000"
      FAKE_AGENT_MARKER: `+marker+`
`)
		res := runKusaw(t, dir, "run")
		if res.code != 1 || !strings.Contains(res.stderr, "limit_reached") {
			t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		id := onlyRun(t, dir)
		b := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "agent", "1", "attempt.json"))
		var a struct {
			Outcome, Reason, Message string
			Usage                    *struct {
				InputTokens int64 `json:"input_tokens"`
			} `json:"usage"`
		}
		json.Unmarshal([]byte(b), &a)
		if a.Outcome != "failed" || a.Reason != "limit_reached" || !strings.Contains(a.Message, "limits.tokens (1000)") {
			t.Errorf("attempt %s/%s: %s", a.Outcome, a.Reason, a.Message)
		}
		if a.Usage == nil || a.Usage.InputTokens < 5000 {
			t.Errorf("the running usage is not recorded: %+v", a.Usage)
		}
		events := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "agent", "1", "events.jsonl"))
		if !strings.Contains(events, `"type":"limit.reached"`) || !strings.Contains(events, `"limit":"tokens"`) {
			t.Errorf("no limit.reached event naming tokens")
		}
	})
	t.Run("claude's own turn limit", func(t *testing.T) {
		dir := providerFactory(t, `pipelines:
  default: [agent]
steps:
  agent:
    prompt: do it
    limits: {turns: 1}
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file
`)
		res := runKusaw(t, dir, "run")
		if res.code != 1 {
			t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		id := onlyRun(t, dir)
		b := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "agent", "1", "attempt.json"))
		if !strings.Contains(b, `"--max-turns",`) || !strings.Contains(b, `"reason": "limit_reached"`) || !strings.Contains(b, "stopped itself at its limits.turns") {
			t.Errorf("the CLI's own --max-turns was not passed or not read:\n%s", b)
		}
	})
	t.Run("pipeline cost", func(t *testing.T) {
		dir := providerFactory(t, `pipelines:
  default:
    steps: [plan, build]
    limits: {cost_usd: 0.1}
steps:
  plan:
    prompt: plan it
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_TOKENS: "100000"
  build:
    prompt: build it
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
`)
		res := runKusaw(t, dir, "run")
		if res.code != 1 || !strings.Contains(res.stderr, "limit_reached") || !strings.Contains(res.stderr, "before step build") {
			t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		// The run's own summary ends with what it cost.
		if !strings.Contains(res.stdout, "  usage: $") {
			t.Errorf("kusaw run's summary has no usage line:\n%s", res.stdout)
		}
		id := onlyRun(t, dir)
		if _, ok := loadAttempt(t, dir, id, "build", 1); ok {
			t.Error("step build ran after the pipeline's cost limit was crossed")
		}
		var run struct {
			Reason string `json:"reason"`
			Usage  *struct {
				CostUSD     *float64 `json:"cost_usd"`
				InputTokens int64    `json:"input_tokens"`
				Attempts    int      `json:"attempts"`
			} `json:"usage"`
			Steps []struct {
				ID    string          `json:"id"`
				Usage json.RawMessage `json:"usage"`
			} `json:"steps"`
		}
		json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"))), &run)
		if run.Reason != "limit_reached" || run.Usage == nil || run.Usage.CostUSD == nil || *run.Usage.CostUSD <= 0.1 || run.Usage.Attempts != 1 {
			t.Fatalf("run.json: %+v", run)
		}
		if len(run.Steps) != 2 || len(run.Steps[0].Usage) == 0 || len(run.Steps[1].Usage) != 0 {
			t.Errorf("per-step sums: %+v", run.Steps)
		}
		// runs and show print cost and tokens; usage sums the state folder.
		if out := runKusaw(t, dir, "runs"); !strings.Contains(out.stdout, "COST") || !strings.Contains(out.stdout, fmt.Sprintf("$%.4f", *run.Usage.CostUSD)) {
			t.Errorf("kusaw runs:\n%s", out.stdout)
		}
		if out := runKusaw(t, dir, "runs", "--json"); !strings.Contains(out.stdout, `"usage": {`) || !strings.Contains(out.stdout, `"cost_usd"`) {
			t.Errorf("kusaw runs --json has no usage:\n%s", out.stdout)
		}
		if out := runKusaw(t, dir, "show", id); !strings.Contains(out.stdout, "usage: $") || !strings.Contains(out.stdout, "claude-fake-1: $") {
			t.Errorf("kusaw show:\n%s", out.stdout)
		}
		out := runKusaw(t, dir, "usage", "--by", "step", "--since", "1h", "--json")
		var rep struct {
			Runs int `json:"runs"`
			Rows []struct {
				Key   string `json:"key"`
				Usage *struct {
					CostUSD *float64 `json:"cost_usd"`
				} `json:"usage"`
			} `json:"rows"`
		}
		if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil || rep.Runs != 1 || len(rep.Rows) != 1 || rep.Rows[0].Key != "plan" || rep.Rows[0].Usage == nil {
			t.Errorf("kusaw usage --by step: %v\n%s%s", err, out.stdout, out.stderr)
		}
		if out := runKusaw(t, dir, "usage"); !strings.Contains(out.stdout, "default") || !strings.Contains(out.stdout, "total") {
			t.Errorf("kusaw usage:\n%s", out.stdout)
		}
		if out := runKusaw(t, dir, "usage", "--by", "week"); out.code != 2 || !strings.Contains(out.stderr, "use pipeline, step or day") {
			t.Errorf("kusaw usage --by week: exit %d %s", out.code, out.stderr)
		}
	})
}

// kusaw sandbox doctor's P9 for a Cursor step: the API is reached through
// the proxy and the attempt's cli-config.json has HTTP/1.1 for the agent
// stream. Twins: the API's host not on the allowlist (refused: the fix
// names provider_hosts), and a step env that replaces kusaw's config
// folder.
func TestDoctorCursorAgentTraffic(t *testing.T) {
	needSandbox(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) }))
	defer api.Close()
	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())
	f := buildFakes(t)
	for _, c := range []struct {
		name, allow, env, status, want string
	}{
		{"reached", `["localhost:` + port + `"]`, "", "pass", "useHttp1ForAgent"},
		{"not allowed", `[]`, "", "fail", "provider_hosts"},
		{"config replaced", `["localhost:` + port + `"]`, "\n      CURSOR_CONFIG_DIR: /tmp/elsewhere", "fail", "remove CURSOR_CONFIG_DIR"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  cursor: {command: `+f.Cursor+`}
pipelines:
  default: [edit]
steps:
  edit:
    provider: cursor
    prompt: edit it
    sandbox: {mode: required, network: allowlist, egress: {allow: `+c.allow+`}}
    env:
      CURSOR_API_ENDPOINT: http://localhost:`+port+c.env+`
`, "app")
			res := runKusaw(t, dir, "sandbox", "doctor", "--json")
			var rep doctorReport
			if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || len(rep.Steps) != 1 {
				t.Fatalf("doctor exit %d: %v\n%s%s", res.code, err, res.stdout, res.stderr)
			}
			var p9 *struct{ ID, Status, Detail, Fix string }
			for i, p := range rep.Steps[0].Probes {
				if p.ID == "P9" {
					p9 = &rep.Steps[0].Probes[i]
				}
			}
			if p9 == nil {
				t.Fatalf("no P9 for a Cursor step: %+v", rep.Steps[0].Probes)
			}
			if p9.Status != c.status || !strings.Contains(p9.Detail+" "+p9.Fix, c.want) {
				t.Errorf("P9 %s: %s (fix %s); want %s mentioning %q", p9.Status, p9.Detail, p9.Fix, c.status, c.want)
			}
			if (c.status == "pass") != (res.code == 0) {
				t.Errorf("doctor exit %d with P9 %s", res.code, p9.Status)
			}
		})
	}
}
