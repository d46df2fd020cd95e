package providers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/providers/providertest"
	"github.com/kusaw/kusaw/status"
)

func readData(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Streams captured from the real CLIs against local fakes of their APIs.
func TestCodexParseRealStreams(t *testing.T) {
	res, evs := parse(t, "codex", readData(t, "codex-0.171-exec.jsonl"))
	if got := types(evs); got != "init,text,tool,tool,text,result" {
		t.Fatalf("events %s", got)
	}
	if !res.Seen || res.IsError || res.SessionID != "01a233c0-9d11-79c2-9419-652cf5823dc8" || res.Text != "done writing" || res.Tools != 1 || res.Turns != 1 {
		t.Fatalf("result %+v", res)
	}
	u := res.Usage
	if u == nil || u.InputTokens != 160 || u.CacheReadTokens != 40 || u.OutputTokens != 20 || u.CostUSD != nil || u.Tokens() != 220 {
		t.Fatalf("usage %+v", u)
	}
	if d := evs[3].Data; d["name"] != "shell" || d["is_error"] != false || d["exit_code"] != int64(0) {
		t.Fatalf("command item %v", d)
	}
	if evs[1].Data["warning"] != true {
		t.Fatalf("an error item is a warning: %v", evs[1].Data)
	}
	if o, r := mustGet(t, "codex").Outcome(res, 0); o != status.OutcomePassed || r != status.ReasonNone {
		t.Fatalf("outcome %s %s", o, r)
	}

	res, evs = parse(t, "codex", readData(t, "codex-0.171-401.jsonl"))
	if !res.IsError || res.Retries != 2 || !strings.Contains(res.Text, "401 Unauthorized") {
		t.Fatalf("401: %+v", res)
	}
	if got := types(evs); got != "init,retry,retry,result" {
		t.Fatalf("401 events %s", got)
	}
	if o, r := mustGet(t, "codex").Outcome(res, 1); o != status.OutcomeFailed || r != status.ReasonProviderError {
		t.Fatalf("401 outcome %s %s", o, r)
	}
	// Killed while reconnecting: no result, the last error kept.
	res, _ = parse(t, "codex", `{"type":"thread.started","thread_id":"t"}`+"\n"+`{"type":"error","message":"stream disconnected"}`+"\n")
	if o, r := mustGet(t, "codex").Outcome(res, 1); o != status.OutcomeFailed || r != status.ReasonProviderNoResult || res.Text != "stream disconnected" {
		t.Fatalf("no result: %s %s %+v", o, r, res)
	}
}

func TestGeminiParseRealStreams(t *testing.T) {
	res, evs := parse(t, "gemini", readData(t, "gemini-0.61-stream.jsonl"))
	if got := types(evs); got != "init,tool,tool,text,result" {
		t.Fatalf("events %s", got)
	}
	if evs[3].Data["text"] != "done writing" {
		t.Fatalf("deltas not folded: %v", evs[3].Data)
	}
	if !res.Seen || res.IsError || res.SessionID != "e7195981-d35a-4a73-90a4-48844ca3d9b7" || res.Text != "done writing" || res.Tools != 1 || res.DurationMS != 492 {
		t.Fatalf("result %+v", res)
	}
	u := res.Usage
	if u == nil || u.InputTokens != 240 || u.CacheReadTokens != 60 || u.OutputTokens != 30 || u.Models["gemini-fake-1"] == nil || u.Models["gemini-fake-1"].InputTokens != 240 {
		t.Fatalf("usage %+v", u)
	}
	res, _ = parse(t, "gemini", readData(t, "gemini-0.61-badkey.jsonl"))
	if o, r := mustGet(t, "gemini").Outcome(res, 144); o != status.OutcomeFailed || r != status.ReasonProviderError || !strings.Contains(res.Text, "API key not valid") {
		t.Fatalf("bad key: %s %s %+v", o, r, res)
	}
}

func TestCodexArgv(t *testing.T) {
	p := mustGet(t, "codex")
	argv, err := p.Argv(RunRequest{Prompt: "fix", Sandboxed: true, ExtraDirs: []string{"/w/b"}})
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(argv, " ")
	if !strings.Contains(s, "--dangerously-bypass-approvals-and-sandbox") || strings.Contains(s, "--sandbox") || strings.Contains(s, "model_provider") {
		t.Fatalf("sandboxed: %q", argv)
	}
	for _, q := range []string{"--disable plugins", "analytics.enabled=false", "otel.metrics_exporter=none"} {
		if !strings.Contains(s, q) {
			t.Errorf("sandboxed argv lacks %s: %q", q, argv)
		}
	}
	// Outside kusaw's sandbox its own stays on.
	argv, _ = p.Argv(RunRequest{Prompt: "fix", ExtraDirs: []string{"/w/b"}})
	s = strings.Join(argv, " ")
	if strings.Contains(s, "dangerously") || !strings.Contains(s, "--sandbox workspace-write") || !strings.Contains(s, "--add-dir /w/b") {
		t.Fatalf("unsandboxed: %q", argv)
	}
	// A gateway: the custom model provider, base_url as a TOML string.
	argv, _ = p.Argv(RunRequest{Prompt: "fix", BaseURL: `https://gw.example/v1"x`, Model: "gpt-5"})
	if !slices.Contains(argv, `model_providers.kusaw.base_url="https://gw.example/v1\"x"`) || !slices.Contains(argv, "model_provider=kusaw") ||
		!slices.Contains(argv, `model_providers.kusaw.wire_api="responses"`) || !slices.Contains(argv, `model_providers.kusaw.env_key="OPENAI_API_KEY"`) {
		t.Fatalf("base URL: %q", argv)
	}
	if i := slices.Index(argv, "--model"); i < 0 || argv[i+1] != "gpt-5" {
		t.Fatalf("model: %q", argv)
	}
	// Inject: the base URL is the lease's, known at start.
	argv, _ = p.Argv(RunRequest{Prompt: "fix", Sandboxed: true, BaseURLFromEnv: true, Resume: "sess-1"})
	got, err := ExpandArgv(argv, func(k string) (string, bool) {
		if k == "OPENAI_BASE_URL" {
			return "http://127.0.0.1:5/inject/codex/tok", true
		}
		return "", false
	})
	if err != nil || !slices.Contains(got, `model_providers.kusaw.base_url="http://127.0.0.1:5/inject/codex/tok"`) {
		t.Fatalf("expanded %q %v", got, err)
	}
	if n := len(got); got[n-4] != "resume" || got[n-3] != "sess-1" || got[n-2] != "--" || got[n-1] != "fix" {
		t.Fatalf("resume: %q", got)
	}
	if _, err := ExpandArgv(argv, func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "OPENAI_BASE_URL") {
		t.Fatalf("unset base URL: %v", err)
	}
	for _, bad := range [][]string{{"--json"}, {"-s", "read-only"}, {"--dangerously-bypass-approvals-and-sandbox"}, {"--"}, {"-c", "x=\x00"}} {
		if _, err := p.Argv(RunRequest{Prompt: "x", Args: bad}); err == nil || !strings.Contains(err.Error(), "providers.codex.args") {
			t.Errorf("args %q: %v", bad, err)
		}
	}
}

func TestGeminiArgv(t *testing.T) {
	p := mustGet(t, "gemini")
	argv, _ := p.Argv(RunRequest{Prompt: "-x", Sandboxed: true, ExtraDirs: []string{"/w/b"}, Resume: "s1", Model: "gemini-2.5-pro"})
	s := strings.Join(argv, " ")
	if !strings.Contains(s, "--yolo") || strings.Contains(s, "--approval-mode") || !strings.Contains(s, "--skip-trust") || !strings.Contains(s, "--include-directories /w/b") ||
		!strings.Contains(s, "--resume s1") || !strings.Contains(s, "--model gemini-2.5-pro") || argv[len(argv)-1] != "--prompt=-x" {
		t.Fatalf("sandboxed: %q", argv)
	}
	// With the attempt's own Gemini home, the previous attempt's session
	// is imported from the file CarrySession puts there.
	argv, _ = p.Argv(RunRequest{Prompt: "x", Resume: "s1", ConfigDir: "/a/pc"})
	if s := strings.Join(argv, " "); !strings.Contains(s, "--session-file /a/pc/gemini-home/"+GeminiResumeFile) || strings.Contains(s, "--resume") {
		t.Fatalf("resume with a config folder: %q", argv)
	}
	argv, _ = p.Argv(RunRequest{Prompt: "x"})
	if s := strings.Join(argv, " "); strings.Contains(s, "--yolo") || !strings.Contains(s, "--approval-mode auto_edit") {
		t.Fatalf("unsandboxed: %q", argv)
	}
	for _, bad := range [][]string{{"-y"}, {"--sandbox"}, {"-o", "json"}, {"--resume", "latest"}, {"--session-file", "/x.json"}} {
		if _, err := p.Argv(RunRequest{Prompt: "x", Args: bad}); err == nil {
			t.Errorf("args %q accepted", bad)
		}
	}
}

// The settings kusaw writes are what lets the CLI use the key: without
// them the fake (as the real CLI) exits 41; untrusted, 55.
func TestGeminiSettingsNeeded(t *testing.T) {
	f := buildFakes(t)
	p := mustGet(t, "gemini")
	req := RunRequest{Command: f.Gemini, Prompt: "hi", Sandboxed: true}
	argv, _ := p.Argv(req)
	r := runAgent(t, p, argv, t.TempDir(), "GEMINI_API_KEY=k")
	if r.code != 41 || r.res.Seen {
		t.Fatalf("without the auth type: exit %d %q", r.code, r.stderr)
	}
	dir := t.TempDir()
	env, _, err := AttemptConfig("gemini", dir, PrepareInput{Sandboxed: true, Inject: true})
	if err != nil || len(env) != 1 {
		t.Fatal(env, err)
	}
	r = runAgent(t, p, argv, t.TempDir(), append(env, "GEMINI_API_KEY=k")...)
	if o, _ := p.Outcome(r.res, r.code); o != status.OutcomePassed {
		t.Fatalf("with kusaw's settings: exit %d %q", r.code, r.stderr)
	}
	b, _ := os.ReadFile(filepath.Join(dir, GeminiHomeDir, ".gemini", "settings.json"))
	if !bytes.Contains(b, []byte(`"usageStatisticsEnabled": false`)) || !bytes.Contains(b, []byte(`"gemini-api-key"`)) {
		t.Fatalf("settings %s", b)
	}
	noTrust := slices.DeleteFunc(slices.Clone(argv), func(a string) bool { return a == "--skip-trust" })
	if r := runAgent(t, p, noTrust, t.TempDir(), append(env, "GEMINI_API_KEY=k")...); r.code != 55 {
		t.Fatalf("untrusted: exit %d", r.code)
	}
}

// The fakes call the fake APIs as the real CLIs do: the base URL and key
// kusaw's argv and env give them reach the API.
func TestFakeCodexGeminiCallAPI(t *testing.T) {
	f := buildFakes(t)
	resp := providertest.NewResponsesAPI(t, "pong from responses")
	resp.WantKey = "real-openai"
	p := mustGet(t, "codex")
	argv, _ := p.Argv(RunRequest{Command: f.Codex, Prompt: "ping", Sandboxed: true, BaseURL: resp.URL + "/v1"})
	r := runAgent(t, p, argv, t.TempDir(), "OPENAI_API_KEY=real-openai", "FAKE_AGENT_SCENARIO=call_api")
	if o, _ := p.Outcome(r.res, r.code); o != status.OutcomePassed || r.res.Text != "pong from responses" {
		t.Fatalf("codex: %s %+v %q", o, r.res, r.stderr)
	}
	r = runAgent(t, p, argv, t.TempDir(), "OPENAI_API_KEY="+PlaceholderKey, "FAKE_AGENT_SCENARIO=call_api")
	if o, reason := p.Outcome(r.res, r.code); o != status.OutcomeFailed || reason != status.ReasonProviderError || !strings.Contains(r.res.Text, "401") {
		t.Fatalf("codex placeholder key: %s %s %q", o, reason, r.res.Text)
	}

	gem := providertest.NewGeminiAPI(t, "pong from gemini")
	gem.WantKey = "real-gemini"
	g := mustGet(t, "gemini")
	dir := t.TempDir()
	env, _, _ := AttemptConfig("gemini", dir, PrepareInput{Sandboxed: true, Inject: true})
	argv, _ = g.Argv(RunRequest{Command: f.Gemini, Prompt: "ping", Sandboxed: true})
	r = runAgent(t, g, argv, t.TempDir(), append(env, "GEMINI_API_KEY=real-gemini", "GOOGLE_GEMINI_BASE_URL="+gem.URL, "FAKE_AGENT_SCENARIO=call_api")...)
	if o, _ := g.Outcome(r.res, r.code); o != status.OutcomePassed || r.res.Text != "pong from gemini" {
		t.Fatalf("gemini: %s %+v %q", o, r.res, r.stderr)
	}
	if reqs := gem.Requests(); len(reqs) != 1 || reqs[0].Header.Get("x-goog-api-key") != "real-gemini" {
		t.Fatalf("gemini requests %+v", reqs)
	}
}

// The attempt's Gemini home keeps the user's settings and sign-in but not
// their sessions: one attempt cannot read another's conversation.
func TestGeminiAttemptHome(t *testing.T) {
	home := t.TempDir()
	user := filepath.Join(home, ".gemini")
	os.MkdirAll(filepath.Join(user, "tmp", "proj", "chats"), 0o700)
	os.WriteFile(filepath.Join(user, "settings.json"), []byte(`{"model":{"name":"gemini-2.5-pro"},"privacy":{"usageStatisticsEnabled":true}}`), 0o600)
	os.WriteFile(filepath.Join(user, "oauth_creds.json"), []byte(`{}`), 0o600)
	dir := t.TempDir()
	env, err := gemini{}.attemptConfig(dir, PrepareInput{Sandboxed: true}, home, func(string) string { return "" })
	if err != nil || len(env) != 1 || env[0] != "GEMINI_CLI_HOME="+filepath.Join(dir, GeminiHomeDir) {
		t.Fatal(env, err)
	}
	state := filepath.Join(dir, GeminiHomeDir, ".gemini")
	b, _ := os.ReadFile(filepath.Join(state, "settings.json"))
	if !bytes.Contains(b, []byte(`"gemini-2.5-pro"`)) || !bytes.Contains(b, []byte(`"usageStatisticsEnabled": false`)) || bytes.Contains(b, []byte("selectedType")) {
		t.Fatalf("settings without a key in the env: %s", b)
	}
	if l, err := os.Readlink(filepath.Join(state, "oauth_creds.json")); err != nil || l != filepath.Join(user, "oauth_creds.json") {
		t.Fatalf("sign-in not linked: %q %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(state, "tmp")); err == nil {
		t.Fatal("the user's sessions (tmp) are linked into the attempt")
	}
	// A fresh HOME carries nothing of the user's.
	dir = t.TempDir()
	gemini{}.attemptConfig(dir, PrepareInput{Sandboxed: true, FreshHome: true, StepEnv: []string{"GEMINI_API_KEY"}}, home, func(string) string { return "" })
	if _, err := os.Lstat(filepath.Join(dir, GeminiHomeDir, ".gemini", "oauth_creds.json")); err == nil {
		t.Fatal("fresh HOME got the user's sign-in")
	}
	b, _ = os.ReadFile(filepath.Join(dir, GeminiHomeDir, ".gemini", "settings.json"))
	if !bytes.Contains(b, []byte(`"gemini-api-key"`)) {
		t.Fatalf("key in the env, no auth type: %s", b)
	}
}

func TestDisplayArgv(t *testing.T) {
	argv := []string{"codex", "-c", "x=" + tomlString(EnvRef("OPENAI_BASE_URL")), "--", "p"}
	got := DisplayArgv(argv)
	if got[2] != `x="${OPENAI_BASE_URL}"` || argv[2] == got[2] || got[4] != "p" {
		t.Fatalf("%q", got)
	}
}

func TestCodexAttemptHome(t *testing.T) {
	home := t.TempDir()
	user := filepath.Join(home, ".codex")
	os.MkdirAll(filepath.Join(user, "sessions"), 0o700)
	os.WriteFile(filepath.Join(user, "auth.json"), []byte(`{}`), 0o600)
	dir := t.TempDir()
	env, err := codex{}.attemptConfig(dir, PrepareInput{Sandboxed: true}, home, func(string) string { return "" })
	ch := filepath.Join(dir, CodexHomeDir)
	if err != nil || len(env) != 1 || env[0] != "CODEX_HOME="+ch {
		t.Fatal(env, err)
	}
	if l, err := os.Readlink(filepath.Join(ch, "auth.json")); err != nil || l != filepath.Join(user, "auth.json") {
		t.Fatalf("sign-in not linked: %q %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(ch, "sessions")); err == nil {
		t.Fatal("the user's sessions are linked into the attempt")
	}
	if env, _ := (codex{}).attemptConfig(t.TempDir(), PrepareInput{}, home, func(string) string { return "" }); env != nil {
		t.Fatalf("outside the sandbox the user's CODEX_HOME stays: %v", env)
	}
}

// The real Codex against an upstream that answers every request with 502
// (what the egress proxy answers for a TLS failure): kusaw's retry caps
// end the attempt after at most (1 + CodexMaxRetries)² model requests
// (each stream retry makes its requests again), where Codex's defaults
// make 30 over half a minute.
func TestRealCodexRetriesCapped(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real codex")
	}
	bin, _ := providertest.InstallNPM(t, providertest.CodexCLI)
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses") {
			mu.Lock()
			posts++
			mu.Unlock()
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, `{"error":{"message":"kusaw: the upstream's certificate is not trusted"}}`)
	}))
	t.Cleanup(srv.Close)
	p := mustGet(t, "codex")
	argv, err := p.Argv(RunRequest{Command: bin, Prompt: "hi", BaseURL: srv.URL + "/v1", Model: "gpt-fake-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = t.TempDir()
	home := t.TempDir()
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "CODEX_HOME=" + home, "OPENAI_API_KEY=k"}
	out, _ := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("codex did not end: %s", tail(out, 1500))
	}
	res := p.ParseStream(strings.NewReader(string(out)), func(Event) {})
	if o, _ := p.Outcome(res, cmd.ProcessState.ExitCode()); o != status.OutcomeFailed {
		t.Fatalf("outcome %s, want failed: %s", o, tail(out, 1500))
	}
	mu.Lock()
	defer mu.Unlock()
	if max := (1 + CodexMaxRetries) * (1 + CodexMaxRetries); posts < 1 || posts > max {
		t.Fatalf("codex sent %d model requests, want 1 to %d (retries capped)", posts, max)
	}
}
