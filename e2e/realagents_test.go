package e2e

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/providers/providertest"
	"github.com/kusaw/kusaw/secretstore"
)

// realAgent is one real agent CLI from npm and a local fake of its model
// API, for the e2e runs below.
type realAgent struct {
	provider string
	cli      providertest.NPMCLI
	model    string
	// start starts the fake API; it returns its URL and a function that
	// lists the keys the model requests carried.
	start func(t *testing.T, key string) (apiURL string, keys func() []string)
	// keyEnv and baseEnv are the step env names for the sandbox-off run.
	keyEnv, baseEnv string
	// baseURL turns the API's root URL into the provider's base_url.
	baseURL func(root string) string
	// agent is the provider's agent: block (flow YAML) when the factory
	// describes it; offArgs its args with kusaw's sandbox off.
	agent, offArgs string
	// refusedOK are hosts the CLI tries and goes on without (handshake
	// hosts of its description, which kusaw never allows by itself).
	refusedOK []string
}

// opencodeAgent is opencode 1.18 described in the factory.
const opencodeAgent = `{argv: [opencode, run, "{sandbox_off}", --pure, --format=json, "--model=kusaw/{model}", "{prompt}"],
    stream: {result: /part/reason=stop, session: /sessionID,
      usage: {input_tokens: /part/tokens/input, output_tokens: /part/tokens/output, cache_read_tokens: /part/tokens/cache/read, cost_usd: /part/cost}},
    key_env: OPENAI_API_KEY, base_url_env: OPENAI_BASE_URL,
    login_folders: [~/.local/share/opencode, ~/.local/state/opencode, ~/.config/opencode, ~/.cache/opencode],
    env: {OPENCODE_CONFIG_CONTENT: '{"autoupdate":false,"share":"disabled","provider":{"kusaw":{"npm":"@ai-sdk/openai-compatible","options":{"baseURL":"{env:OPENAI_BASE_URL}","apiKey":"{env:OPENAI_API_KEY}"},"models":{"fake-model":{}}}}}',
      OPENCODE_DISABLE_AUTOUPDATE: "1", OPENCODE_DISABLE_MODELS_FETCH: "1", OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
      OPENCODE_DISABLE_LSP_DOWNLOAD: "1", OPENCODE_DISABLE_SHARE: "1", OPENCODE_DISABLE_CLAUDE_CODE: "1"},
    egress_hosts: [api.openai.com], handshake_hosts: [models.dev, opencode.ai, registry.npmjs.org], sandbox_off_args: [--auto],
    inject: {host: api.openai.com, header: Authorization, upstream: "https://api.openai.com/v1"}}`

// qwenAgent is docs/providers.md's worked example: Qwen Code described
// in the factory file.
const qwenAgent = `{argv: [qwen, --auth-type=openai, --output-format=stream-json, "--model={model}", "{prompt}"],
    stream: {result: /type=result, success: /is_error=false, text: /result, session: /session_id,
      usage: {input_tokens: /usage/input_tokens, output_tokens: /usage/output_tokens, cache_read_tokens: /usage/cache_read_input_tokens}},
    key_env: OPENAI_API_KEY, base_url_env: OPENAI_BASE_URL, login_folders: [~/.qwen],
    env: {QWEN_USAGE_STATISTICS_ENABLED: "false", QWEN_TELEMETRY_ENABLED: "false", QWEN_CODE_SUPPRESS_YOLO_WARNING: "1"},
    egress_hosts: [dashscope.aliyuncs.com], handshake_hosts: [gb4w8c3ygj-default-sea.rum.aliyuncs.com], sandbox_off_args: [--yolo],
    inject: {host: dashscope.aliyuncs.com, header: Authorization, upstream: "https://dashscope.aliyuncs.com/compatible-mode/v1"}}`

// startChatAPI is the fake Chat Completions API the OpenAI-compatible
// CLIs (opencode, Qwen Code) talk to: its one answer has the agent write
// out.txt; it returns each completion request's key and body.
func startChatAPI(t *testing.T, key string) (string, func() []string) {
	api := providertest.NewChatAPI(t, "wrote out.txt")
	api.WantKey = key
	api.Commands = []string{"printf 'hello from the agent\\n' > out.txt"}
	return api.URL, func() (keys []string) {
		for _, r := range api.Completions() {
			keys = append(keys, strings.TrimPrefix(r.Header.Get("authorization"), "Bearer ")+"|"+string(r.Body))
		}
		return keys
	}
}

var realAgents = map[string]realAgent{
	"gemini": {
		provider: "gemini", cli: providertest.GeminiCLI, model: "gemini-2.5-flash",
		start: func(t *testing.T, key string) (string, func() []string) {
			api := providertest.NewGeminiAPI(t, "wrote out.txt")
			api.WantKey = key
			api.Writes = []providertest.GeminiWrite{{Path: "out.txt", Content: "hello from the agent\n"}}
			return api.URL, func() (keys []string) {
				for _, r := range api.Requests() {
					if strings.Contains(r.Path, "GenerateContent") {
						keys = append(keys, r.Header.Get("x-goog-api-key")+"|"+string(r.Body))
					}
				}
				return keys
			}
		},
		keyEnv: "GEMINI_API_KEY", baseEnv: "GOOGLE_GEMINI_BASE_URL",
		baseURL: func(root string) string { return root },
	},
	"codex": {
		provider: "codex", cli: providertest.CodexCLI, model: "gpt-fake-1",
		start: func(t *testing.T, key string) (string, func() []string) {
			api := providertest.NewResponsesAPI(t, "wrote out.txt")
			api.WantKey = key
			api.Commands = []string{"printf 'hello from the agent\\n' > out.txt"}
			return api.URL, func() (keys []string) {
				for _, r := range api.Requests() {
					if strings.HasSuffix(r.Path, "/responses") {
						keys = append(keys, strings.TrimPrefix(r.Header.Get("authorization"), "Bearer ")+"|"+string(r.Body))
					}
				}
				return keys
			}
		},
		baseURL: func(root string) string { return root + "/v1" },
	},
	// opencode, not yet a built-in provider, described in the factory:
	// its config (OPENCODE_CONFIG_CONTENT) adds an OpenAI-compatible
	// provider whose base URL and key come from the variables inject sets.
	"oc": {
		provider: "oc", cli: providertest.OpencodeCLI, model: "fake-model",
		start:  startChatAPI,
		keyEnv: "OPENAI_API_KEY", baseEnv: "OPENAI_BASE_URL",
		baseURL: func(root string) string { return root + "/v1" },
		agent:   opencodeAgent, offArgs: "[--auto]",
		// opencode asks the npm registry about its provider's package
		// (@ai-sdk/openai-compatible) and works on with the one it has.
		refusedOK: []string{"registry.npmjs.org"},
	},
	// opencode built in: the description above, shipped.
	"opencode": {
		provider: "opencode", cli: providertest.OpencodeCLI, model: "fake-model",
		start:  startChatAPI,
		keyEnv: "OPENAI_API_KEY", baseEnv: "OPENAI_BASE_URL",
		baseURL:   func(root string) string { return root + "/v1" },
		refusedOK: []string{"registry.npmjs.org"},
	},
	"qwen": {
		provider: "qwen", cli: providertest.QwenCLI, model: "fake-model",
		start:  startChatAPI,
		keyEnv: "OPENAI_API_KEY", baseEnv: "OPENAI_BASE_URL",
		baseURL: func(root string) string { return root + "/v1" },
		agent:   qwenAgent, offArgs: "[--yolo]",
	},
}

// providerYAML is the provider's entry in the factory (flow YAML).
func (a realAgent) providerYAML(bin, baseURL string) string {
	s := `{command: ` + bin + `, model: ` + a.model
	if baseURL != "" {
		s += `, base_url: "` + baseURL + `"`
	}
	if a.agent != "" {
		s += `,
    agent: ` + a.agent
	}
	return s + `}`
}

// The agent writes out.txt, the next step reads it.
const realAgentPipeline = `pipelines:
  default: [write, check]
steps:
  write:
    prompt: write hello to out.txt
    provider: PROVIDER
STEP
  check:
    run: [sh, -c, 'grep -qx "hello from the agent" out.txt']
`

// runRealAgent runs the real CLI of a in kusaw: sandboxed with an
// allowlist and the key injected by the proxy, or with the sandbox off and
// the key in the step's env. The fake API must see the real key on every
// model request, the agent's file must reach the next step, usage must be
// recorded, and no file of the factory (state folder, worktrees, the
// test's HOME) may hold the key.
func runRealAgent(t *testing.T, a realAgent, sandboxed bool) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real " + a.provider)
	}
	bin, version := providertest.InstallNPM(t, a.cli)
	t.Logf("%s %s at %s", a.cli.Package, version, bin)
	realKey := "e2e-real-" + a.provider + "-key-5150"
	root, keys := a.start(t, realKey)
	var dir string
	var extraEnv []string
	if sandboxed {
		needSandbox(t)
		// The proxy's upstream is verified TLS: a TLS front with a CA of
		// the test's own on https://localhost:PORT (a local gateway).
		fx := &egressFixture{tools: t.TempDir()}
		fx.makeCA(t)
		target, _ := url.Parse(root)
		front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
		front.TLS = &tls.Config{Certificates: []tls.Certificate{fx.leaf}}
		front.StartTLS()
		t.Cleanup(front.Close)
		_, port, _ := net.SplitHostPort(front.Listener.Addr().String())
		dir = factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  `+a.provider+`: `+a.providerYAML(bin, a.baseURL("https://localhost:"+port))+`
`+strings.Replace(strings.Replace(realAgentPipeline, "PROVIDER", a.provider, 1), "STEP", "    sandbox: {mode: required, network: allowlist, egress: {inject: provider}}", 1), "app")
		set := exec.Command(kusawBin, "config", "set", "providers."+a.provider+".api_key", "--secret")
		set.Dir = dir
		set.Env = testEnv(t, dir)
		set.Stdin = strings.NewReader(realKey + "\n")
		if out, err := set.CombinedOutput(); err != nil {
			t.Fatalf("kusaw config set --secret: %v\n%s", err, out)
		}
		extraEnv = []string{"SSL_CERT_FILE=" + fx.caPEM}
	} else {
		var prov, env string
		switch a.provider {
		case "codex":
			// Codex takes its base URL from kusaw's model provider.
			prov = a.providerYAML(bin, a.baseURL(root))
			env = "      OPENAI_API_KEY: {secret: agent.key}"
		default:
			prov = a.providerYAML(bin, "")
			env = "      " + a.keyEnv + ": {secret: agent.key}\n      " + a.baseEnv + ": " + a.baseURL(root)
		}
		if a.offArgs != "" {
			// Outside kusaw's sandbox the CLI's own approvals stay on
			// unless the factory turns them off itself.
			prov = strings.Replace(prov, "{command: ", "{args: "+a.offArgs+", command: ", 1)
		}
		dir = factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  `+a.provider+`: `+prov+`
`+strings.Replace(strings.Replace(realAgentPipeline, "PROVIDER", a.provider, 1), "STEP", "    sandbox: off\n    env:\n"+env, 1), "app")
		if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("agent.key", realKey); err != nil {
			t.Fatal(err)
		}
	}
	res := runKusawEnv(t, dir, extraEnv, "run")
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs")); err != nil {
		t.Fatalf("kusaw run exit %d, no run\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "write", "1")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s\nwrite stdout.log: %s\nstderr.log: %s\negress.log: %s\ncheck: %s", res.code, res.stdout, res.stderr,
			mayRead(filepath.Join(adir, "stdout.log")), mayRead(filepath.Join(adir, "stderr.log")), mayRead(filepath.Join(adir, "egress.log")),
			mayRead(filepath.Join(dir, ".kusaw", "runs", id, "steps", "check", "1", "stderr.log")))
	}
	got := keys()
	if len(got) < 2 {
		t.Fatalf("the fake API got %d model requests, want the tool call and its answer", len(got))
	}
	for _, k := range got {
		key, body, _ := strings.Cut(k, "|")
		if key != realKey || strings.Contains(body, "factory-egress-placeholder") {
			t.Fatalf("the API got key %q", key)
		}
	}
	var rec struct {
		Usage *struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(adir, "attempt.json"))), &rec); err != nil || rec.Usage == nil || rec.Usage.InputTokens == 0 || rec.Usage.OutputTokens == 0 {
		t.Fatalf("attempt.json usage: %+v %v", rec.Usage, err)
	}
	if sandboxed {
		elog := readFile(t, filepath.Join(adir, "egress.log"))
		if !strings.Contains(elog, `"kind":"inject"`) || strings.Contains(elog, "address.refused") {
			t.Errorf("egress.log: want the inject, no refusal:\n%s", elog)
		}
		if a.agent != "" || a.refusedOK != nil {
			// The description's env turns the CLI's usage statistics off.
			for _, line := range strings.Split(elog, "\n") {
				var e struct{ Host, Reason string }
				if json.Unmarshal([]byte(line), &e) == nil && e.Reason == "host.not_allowed" && !slices.Contains(a.refusedOK, e.Host) {
					t.Errorf("egress.log: the described agent tried %s, which its allowlist lacks:\n%s", e.Host, elog)
				}
			}
		}
	}
	// The key may be in the secret store only (encrypted or not, it is
	// not the factory's); nowhere else of the factory folder and home.
	for _, h := range grepDir(t, dir, realKey) {
		if !strings.HasPrefix(h, filepath.Join(dir, "secrets")+string(filepath.Separator)) {
			t.Errorf("the real key is in %s", h)
		}
	}
}

func TestRealGeminiCLISandboxedInject(t *testing.T) { runRealAgent(t, realAgents["gemini"], true) }
func TestRealGeminiCLIOffKeyInEnv(t *testing.T)     { runRealAgent(t, realAgents["gemini"], false) }
func TestRealCodexCLIOffKeyInEnv(t *testing.T)      { runRealAgent(t, realAgents["codex"], false) }
func TestRealCodexCLISandboxedInject(t *testing.T)  { runRealAgent(t, realAgents["codex"], true) }

// Qwen Code through an agent described in the factory (no built-in
// provider): the same run as the built-in ones'.
func TestRealQwenAgentSandboxedInject(t *testing.T) { runRealAgent(t, realAgents["qwen"], true) }
func TestRealQwenAgentOffKeyInEnv(t *testing.T)     { runRealAgent(t, realAgents["qwen"], false) }

// opencode (npm opencode-ai) described in the factory, with the sandbox
// off (it trusts PWD over its working folder: kusaw sets PWD). Sandboxed
// it does not run yet: it cannot open its log file in the login copy of
// ~/.local/share/opencode (FileSystem.open), so that twin waits for the
// built-in provider.
func TestRealOpencodeAgentOffKeyInEnv(t *testing.T)   { runRealAgent(t, realAgents["oc"], false) }
func TestRealOpencodeCLISandboxedInject(t *testing.T) { runRealAgent(t, realAgents["opencode"], true) }

// mayRead is a file's text for a failure message; a missing file is "".
func mayRead(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// A fix loop that continues the agent's session: the real Codex's first
// attempt fails (the fake API refuses its request), a fixer runs, and the
// second attempt resumes the first one's session (codex exec resume),
// sandboxed with the key injected: its request carries the first
// attempt's prompt again, as the conversation so far.
func TestRealCodexCLIContinueSession(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real codex")
	}
	needSandbox(t)
	bin, _ := providertest.InstallNPM(t, providertest.CodexCLI)
	const realKey = "e2e-real-codex-resume-key-77"
	api := providertest.NewResponsesAPI(t, "wrote out.txt")
	api.WantKey = realKey
	api.FailFirst = 1
	api.Commands = []string{"printf 'hello from the agent\\n' > out.txt"}
	fx := &egressFixture{tools: t.TempDir()}
	fx.makeCA(t)
	target, _ := url.Parse(api.URL)
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{fx.leaf}}
	front.StartTLS()
	t.Cleanup(front.Close)
	_, port, _ := net.SplitHostPort(front.Listener.Addr().String())
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  codex: {command: `+bin+`, model: gpt-fake-1, base_url: "https://localhost:`+port+`/v1"}
pipelines:
  default: [write, check]
steps:
  write:
    prompt: the first brief, write hello to out.txt
    provider: codex
    attempts: 2
    on_failure: fixer
    continue_session: true
    sandbox: {mode: required, network: allowlist, egress: {inject: provider}}
  fixer:
    run: ["true"]
  check:
    run: [sh, -c, 'grep -qx "hello from the agent" out.txt']
`, "app")
	set := exec.Command(kusawBin, "config", "set", "providers.codex.api_key", "--secret")
	set.Dir = dir
	set.Env = testEnv(t, dir)
	set.Stdin = strings.NewReader(realKey + "\n")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("kusaw config set --secret: %v\n%s", err, out)
	}
	res := runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + fx.caPEM}, "run")
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs")); err != nil {
		t.Fatalf("kusaw run exit %d, no run\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	a2 := filepath.Join(dir, ".kusaw", "runs", id, "steps", "write", "2")
	if res.code != 0 {
		out, _ := exec.Command("find", filepath.Join(dir, ".kusaw", "runs", id, "steps", "write")).CombinedOutput()
		t.Logf("files: %s", out)
		t.Fatalf("kusaw run exit %d\n%s%s\nattempt 1: %s\nattempt 2: %s %s", res.code, res.stdout, res.stderr,
			mayRead(filepath.Join(dir, ".kusaw", "runs", id, "steps", "write", "1", "stdout.log")), mayRead(filepath.Join(a2, "stdout.log")), mayRead(filepath.Join(a2, "stderr.log")))
	}
	var first, resumed string
	for _, r := range api.Requests() {
		if !strings.HasSuffix(r.Path, "/responses") {
			continue
		}
		if r.Header.Get("authorization") != "Bearer "+realKey {
			t.Fatalf("the API got %q", r.Header.Get("authorization"))
		}
		if first == "" {
			first = r.Header.Get("session-id")
		} else if resumed == "" {
			resumed = string(r.Body)
			if sid := r.Header.Get("session-id"); sid != first {
				t.Errorf("attempt 2 talked in session %q, not attempt 1's %q", sid, first)
			}
		}
	}
	if strings.Count(resumed, "the first brief") < 2 || !strings.Contains(resumed, "(kusaw: attempt 1") {
		t.Fatalf("attempt 2 did not continue attempt 1's conversation:\n%.3000s", resumed)
	}
	ev := readFile(t, filepath.Join(a2, "events.jsonl"))
	if !strings.Contains(ev, `"resume":"`+first+`"`) {
		t.Errorf("attempt 2's provider.probe does not name the session it continued (%s)", first)
	}
	for _, h := range grepDir(t, dir, realKey) {
		if !strings.HasPrefix(h, filepath.Join(dir, "secrets")+string(filepath.Separator)) {
			t.Errorf("the real key is in %s", h)
		}
	}
}
