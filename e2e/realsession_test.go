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
	"strings"
	"testing"

	"github.com/kusaw/kusaw/providers/providertest"
)

// tlsFront puts a TLS front with a CA of the test's own before a fake API
// (the proxy's upstream is verified TLS) and returns its port and the
// CA file the step trusts.
func tlsFront(t *testing.T, apiURL string) (port, caPEM string) {
	t.Helper()
	fx := &egressFixture{tools: t.TempDir()}
	fx.makeCA(t)
	target, _ := url.Parse(apiURL)
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{fx.leaf}}
	front.StartTLS()
	t.Cleanup(front.Close)
	_, port, _ = net.SplitHostPort(front.Listener.Addr().String())
	return port, fx.caPEM
}

// storeKey puts the provider's API key in the factory's secret store.
func storeKey(t *testing.T, dir, provider, key string) {
	t.Helper()
	set := exec.Command(kusawBin, "config", "set", "providers."+provider+".api_key", "--secret")
	set.Dir = dir
	set.Env = testEnv(t, dir)
	set.Stdin = strings.NewReader(key + "\n")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("kusaw config set --secret: %v\n%s", err, out)
	}
}

// newRuns are the run folders of dir not in before.
func newRun(t *testing.T, dir string, before map[string]bool) string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
	var ids []string
	for _, e := range ents {
		if !before[e.Name()] {
			ids = append(ids, e.Name())
		}
	}
	if len(ids) != 1 {
		t.Fatalf("want one new run, got %v", ids)
	}
	before[ids[0]] = true
	return ids[0]
}

// sessionOfAttempt is the session id an attempt's agent reported.
func sessionOfAttempt(t *testing.T, adir string) string {
	t.Helper()
	var rec struct {
		Processes []struct {
			Result struct {
				SessionID string `json:"session_id"`
			} `json:"provider_result"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(adir, "attempt.json"))), &rec); err != nil {
		t.Fatal(err)
	}
	for _, p := range rec.Processes {
		if p.Result.SessionID != "" {
			return p.Result.SessionID
		}
	}
	t.Fatalf("%s reports no session id", adir)
	return ""
}

// A fix loop that continues the agent's session, with the real Claude Code
// sandboxed (allowlist, key injected): the first attempt fails (the fake
// API refuses its request), a fixer runs, and the second attempt resumes
// the first one's session (--resume ID): the fake API sees the first
// attempt's prompt again in its request, as the conversation so far. The
// session lives in the attempts' own login copies: the user's login folder
// gains none of it. The attack twin: another run of the same step starts
// cold, and its agent, searching its view for the first run's session
// (its login folder, any file named after it), finds nothing.
func TestRealClaudeCodeContinueSession(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real Claude Code")
	}
	needSandbox(t)
	bin, _ := providertest.InstallClaude(t)
	const realKey = "sk-ant-e2e-resume-key-4711"
	api := providertest.NewMessagesAPI(t, "wrote out.txt")
	api.WantKey = realKey
	api.FailUnless = "(kusaw: attempt 1"
	api.Tools = []providertest.ToolUse{{Name: "Bash", Input: map[string]any{"command": "printf 'hello from the agent\\n' > out.txt", "description": "write out.txt"}}}
	port, ca := tlsFront(t, api.URL)
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {command: `+bin+`, base_url: "https://localhost:`+port+`"}
pipelines:
  default: [write, check]
steps:
  write:
    prompt: the first brief, write hello to out.txt
    attempts: 2
    on_failure: fixer
    continue_session: true
    sandbox: {mode: required, network: allowlist, egress: {inject: provider}}
    env:
      DISABLE_TELEMETRY: "1"
      DISABLE_ERROR_REPORTING: "1"
  fixer:
    run: ["true"]
  check:
    run: [sh, -c, 'grep -qx "hello from the agent" out.txt']
`, "app")
	storeKey(t, dir, "claude-code", realKey)
	login := filepath.Join(dir, "home", ".claude")
	const creds = `{"claudeAiOauth":{"accessToken":"e2e-unused","refreshToken":"e2e-unused","expiresAt":4102444800000}}`
	writeFile(t, filepath.Join(login, ".credentials.json"), creds)
	writeFile(t, filepath.Join(login, "projects", "other", "s.jsonl"), "the user's other session\n")
	runs := map[string]bool{}
	res := runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + ca}, "run")
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs")); err != nil {
		t.Fatalf("kusaw run exit %d, no run\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := newRun(t, dir, runs)
	a1 := filepath.Join(dir, ".kusaw", "runs", id, "steps", "write", "1")
	a2 := filepath.Join(dir, ".kusaw", "runs", id, "steps", "write", "2")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s\nattempt 1: %s%s\nattempt 2: %s%s", res.code, res.stdout, res.stderr,
			mayRead(filepath.Join(a1, "stdout.log")), mayRead(filepath.Join(a1, "stderr.log")), mayRead(filepath.Join(a2, "stdout.log")), mayRead(filepath.Join(a2, "stderr.log")))
	}
	sid := sessionOfAttempt(t, a1)
	if got := sessionOfAttempt(t, a2); got != sid {
		t.Errorf("attempt 2 ran session %q, not attempt 1's %q", got, sid)
	}
	if ev := readFile(t, filepath.Join(a2, "events.jsonl")); !strings.Contains(ev, `"resume":"`+sid+`"`) {
		t.Errorf("attempt 2's provider.probe does not name the session it continued (%s)", sid)
	}
	// Attempt 1's requests were refused; the first one carrying kusaw's
	// note is attempt 2's first turn, with attempt 1's prompt in its
	// history and attempt 2's own after it.
	var resumed string
	for _, r := range api.Requests() {
		if r.Method != "POST" || r.Path != "/v1/messages" {
			continue
		}
		if r.Header.Get("x-api-key") != realKey {
			t.Fatalf("the API got key %q", r.Header.Get("x-api-key"))
		}
		if resumed == "" && strings.Contains(string(r.Body), "(kusaw: attempt 1") {
			resumed = string(r.Body)
		}
	}
	if strings.Count(resumed, "the first brief") < 2 || !strings.Contains(resumed, "(kusaw: attempt 1") {
		t.Fatalf("attempt 2 did not continue attempt 1's conversation:\n%.3000s", resumed)
	}
	// The session never reached the user's login folder, which keeps its
	// own session and login.
	if ents, _ := os.ReadDir(filepath.Join(login, "projects")); len(ents) != 1 || ents[0].Name() != "other" {
		t.Errorf("the run changed the user's projects/: %v", ents)
	}
	if hits := grepDir(t, login, sid); len(hits) > 0 {
		t.Errorf("the session is in the user's login folder: %v", hits)
	}
	if readFile(t, filepath.Join(login, ".credentials.json")) != creds {
		t.Errorf("the user's credentials changed")
	}

	// Another run: its agent looks for the first run's session.
	api.FailUnless = ""
	api.Tools = []providertest.ToolUse{{Name: "Bash", Input: map[string]any{
		"command": `{ ls -A "$HOME/.claude/projects"; p="kusaw: attempt"; grep -rl "$p 1" "$HOME/.claude" /tmp; find / -name "` + sid + `*" -not -path "/proc/*"; } > found.txt 2>/dev/null; printf 'hello from the agent\n' > out.txt`, "description": "look around"}}}
	res = runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + ca}, "run")
	id2 := newRun(t, dir, runs)
	b1 := filepath.Join(dir, ".kusaw", "runs", id2, "steps", "write", "1")
	if res.code != 0 {
		t.Fatalf("the second run: exit %d\n%s%s\n%s%s", res.code, res.stdout, res.stderr, mayRead(filepath.Join(b1, "stdout.log")), mayRead(filepath.Join(b1, "stderr.log")))
	}
	if ev := readFile(t, filepath.Join(b1, "events.jsonl")); strings.Contains(ev, `"resume":`) {
		t.Errorf("another run's attempt continued a session:\n%s", ev)
	}
	if got := sessionOfAttempt(t, b1); got == sid {
		t.Errorf("another run's attempt ran the first run's session %s", sid)
	}
	found := git(t, filepath.Join(dir, "app"), "show", "kusaw/"+id2+":found.txt")
	// It lists its own project folders only, and finds no file holding
	// the first run's conversation or named after its session.
	if strings.Contains(found, sid) || strings.Contains(found, id) || strings.Contains(found, "/") {
		t.Errorf("another run's agent found the first run's session (%s, run %s):\n%s", sid, id, found)
	}
	verifyRecords(t, os.Geteuid(), dir)
	for _, h := range grepDir(t, dir, realKey) {
		if !strings.HasPrefix(h, filepath.Join(dir, "secrets")+string(filepath.Separator)) {
			t.Errorf("the real key is in %s", h)
		}
	}
}

// The same fix loop with the real Gemini CLI, sandboxed with the key
// injected: the first attempt fails (the fake API refuses its tool result),
// and the second imports the first one's session (--session-file, from the
// attempt's own Gemini home): its request carries the first attempt's
// prompt again. Another run of the step starts cold.
func TestRealGeminiCLIContinueSession(t *testing.T) {
	t.Parallel() // one of the package's longest: beside the others of them (make test's 15 minutes)
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real gemini")
	}
	needSandbox(t)
	bin, _ := providertest.InstallNPM(t, providertest.GeminiCLI)
	const realKey = "e2e-real-gemini-resume-key-31"
	api := providertest.NewGeminiAPI(t, "wrote out.txt")
	api.WantKey = realKey
	api.FailToolResultsUnless = "(kusaw: attempt 1"
	// Attempt 1 writes, and fails on its tool result; attempt 2 writes in
	// its own worktree again.
	w := providertest.GeminiWrite{Path: "out.txt", Content: "hello from the agent\n"}
	api.Writes = []providertest.GeminiWrite{w, w}
	port, ca := tlsFront(t, api.URL)
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  gemini: {command: `+bin+`, model: gemini-2.5-flash, base_url: "https://localhost:`+port+`"}
pipelines:
  default: [write, check]
steps:
  write:
    prompt: the first brief, write hello to out.txt
    provider: gemini
    attempts: 2
    on_failure: fixer
    continue_session: true
    sandbox: {mode: required, network: allowlist, egress: {inject: provider}}
  fixer:
    run: ["true"]
  check:
    run: [sh, -c, 'grep -qx "hello from the agent" out.txt']
`, "app")
	storeKey(t, dir, "gemini", realKey)
	runs := map[string]bool{}
	res := runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + ca}, "run")
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs")); err != nil {
		t.Fatalf("kusaw run exit %d, no run\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := newRun(t, dir, runs)
	a1 := filepath.Join(dir, ".kusaw", "runs", id, "steps", "write", "1")
	a2 := filepath.Join(dir, ".kusaw", "runs", id, "steps", "write", "2")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s\nattempt 1: %s%s\nattempt 2: %s%s", res.code, res.stdout, res.stderr,
			mayRead(filepath.Join(a1, "stdout.log")), mayRead(filepath.Join(a1, "stderr.log")), mayRead(filepath.Join(a2, "stdout.log")), mayRead(filepath.Join(a2, "stderr.log")))
	}
	sid := sessionOfAttempt(t, a1)
	if ev := readFile(t, filepath.Join(a2, "events.jsonl")); !strings.Contains(ev, `"resume":"`+sid+`"`) {
		t.Errorf("attempt 2's provider.probe does not name the session it continued (%s)", sid)
	}
	var resumed string
	for _, r := range api.Requests() {
		if !strings.HasSuffix(r.Path, ":streamGenerateContent") {
			continue
		}
		if r.Header.Get("x-goog-api-key") != realKey {
			t.Fatalf("the API got key %q", r.Header.Get("x-goog-api-key"))
		}
		if resumed == "" && strings.Contains(string(r.Body), "(kusaw: attempt 1") {
			resumed = string(r.Body)
		}
	}
	if strings.Count(resumed, "the first brief") < 2 {
		t.Fatalf("attempt 2 did not continue attempt 1's conversation:\n%.3000s", resumed)
	}

	// Another run starts cold: no session handed to it.
	api.FailToolResultsUnless = ""
	before := len(api.Requests())
	res = runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + ca}, "run")
	id2 := newRun(t, dir, runs)
	b1 := filepath.Join(dir, ".kusaw", "runs", id2, "steps", "write", "1")
	if res.code != 0 {
		t.Fatalf("the second run: exit %d\n%s%s\n%s%s", res.code, res.stdout, res.stderr, mayRead(filepath.Join(b1, "stdout.log")), mayRead(filepath.Join(b1, "stderr.log")))
	}
	if ev := readFile(t, filepath.Join(b1, "events.jsonl")); strings.Contains(ev, `"resume":`) {
		t.Errorf("another run's attempt continued a session:\n%s", ev)
	}
	for _, r := range api.Requests()[before:] {
		if b := string(r.Body); strings.Contains(b, "(kusaw: attempt 1") || strings.Count(b, "the first brief") > 1 {
			t.Fatalf("another run's agent got the first run's conversation:\n%.2000s", b)
		}
	}
	verifyRecords(t, os.Geteuid(), dir)
	for _, h := range grepDir(t, dir, realKey) {
		if !strings.HasPrefix(h, filepath.Join(dir, "secrets")+string(filepath.Separator)) {
			t.Errorf("the real key is in %s", h)
		}
	}
}

// The real Claude Code sandboxed with inject, as a user signed in to it
// runs it: its session state stays in the attempt (the user's projects/
// gains nothing) and a login the CLI refreshed during the step is carried
// back to the user's credentials file. The refresh is the CLI's own
// process rewriting ~/.claude/.credentials.json inside the sandbox, as
// its refresh does (new tokens, a later expiry), after a connection to
// its token host platform.claude.com (a local stand-in, through the
// proxy, named by a stub DNS), which the egress log shows: Claude Code's
// real refresh talks to claude.com's token endpoint, which a local test
// cannot stand in for. The fake API asks for both through its Bash tool.
//
// The attack, first: the agent writes another account's tokens of the
// same shape there without any connection to the token host. The user's
// file is unchanged and the attempt's sandbox.credentials event says why.
func TestRealClaudeCodeRefreshedLoginCarriedBack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real Claude Code")
	}
	needSandbox(t)
	bin, _ := providertest.InstallClaude(t)
	const realKey = "sk-ant-e2e-refresh-key-2024"
	api := providertest.NewMessagesAPI(t, "refreshed")
	api.WantKey = realKey
	// The new tokens are the old ones reversed (or the attacker's, cut
	// from a word): neither is in the command the agent ran, so the
	// records can be checked for them.
	edit := func(tokens string) string {
		return `node -e 'const fs=require("fs"), f=process.env.HOME+"/.claude/.credentials.json", c=JSON.parse(fs.readFileSync(f)), o=c.claudeAiOauth; ` + tokens + `; o.expiresAt=4102444800999; fs.writeFileSync(f, JSON.stringify(c))'`
	}
	swap := edit(`o.accessToken="attacker-access-tokenXYZ".slice(0,15); o.refreshToken="attacker-refresh-tokenXYZ".slice(0,16)`)
	refresh := edit(`o.accessToken=[...o.accessToken].reverse().join(""); o.refreshToken=[...o.refreshToken].reverse().join("")`)
	port, ca := tlsFront(t, api.URL)
	dns := newStubDNS(t)
	dns.set("localhost", "127.0.0.1")
	dns.set("platform.claude.com", "127.0.0.1")
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
sandbox:
  egress:
    resolver: "`+dns.addr+`"
    allow_ranges: [127.0.0.0/8]
providers:
  claude-code: {command: `+bin+`, base_url: "https://localhost:`+port+`"}
pipelines:
  default: [ask]
steps:
  ask:
    prompt: refresh your login
    sandbox: {mode: required, network: allowlist, egress: {inject: provider, allow: ["platform.claude.com:`+port+`"]}}
    env:
      DISABLE_TELEMETRY: "1"
      DISABLE_ERROR_REPORTING: "1"
`, "app")
	storeKey(t, dir, "claude-code", realKey)
	login := filepath.Join(dir, "home", ".claude")
	const creds = `{"claudeAiOauth":{"accessToken":"e2e-old-access","refreshToken":"e2e-refresh-token","expiresAt":4102444800000,"scopes":["user:inference"],"subscriptionType":"max"},"mcpOAuth":{"srv":{"accessToken":"e2e-mcp"}}}`
	writeFile(t, filepath.Join(login, ".credentials.json"), creds)
	os.Chmod(filepath.Join(login, ".credentials.json"), 0o600)
	writeFile(t, filepath.Join(login, "projects", "other", "s.jsonl"), "the user's other session\n")
	runs := map[string]bool{}
	run := func(command string) (string, string) {
		t.Helper()
		api.Tools = []providertest.ToolUse{{Name: "Bash", Input: map[string]any{"description": "refresh the login", "command": command + " && echo done > refreshed.txt"}}}
		res := runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + ca}, "run")
		id := newRun(t, dir, runs)
		adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "ask", "1")
		if res.code != 0 {
			t.Fatalf("kusaw run exit %d\n%s%s\n%s%s", res.code, res.stdout, res.stderr, mayRead(filepath.Join(adir, "stdout.log")), mayRead(filepath.Join(adir, "stderr.log")))
		}
		if got := git(t, filepath.Join(dir, "app"), "show", "kusaw/"+id+":refreshed.txt"); got != "done" {
			t.Fatalf("the agent's tool call did not run: %q", got)
		}
		var ev map[string]any
		for _, l := range strings.Split(readFile(t, filepath.Join(adir, "events.jsonl")), "\n") {
			if strings.Contains(l, `"sandbox.credentials"`) {
				if ev != nil {
					t.Errorf("two sandbox.credentials events: %s", l)
				}
				json.Unmarshal([]byte(l), &ev)
			}
		}
		data, _ := ev["data"].(map[string]any)
		b, _ := json.Marshal(data)
		return readFile(t, filepath.Join(login, ".credentials.json")), string(b)
	}

	// The attack: another account's tokens, no connection to the token host.
	got, ev := run(swap)
	if got != creds {
		t.Errorf("the swapped login reached the user's file: %s", got)
	}
	if !strings.Contains(ev, `"carried":false`) || !strings.Contains(ev, "made no connection to platform.claude.com") {
		t.Errorf("the attempt does not say why the login was kept: %s", ev)
	}

	// The twin: the token host reached, then the refresh.
	got, ev = run(`curl -sk -o /dev/null https://platform.claude.com:` + port + `/v1/oauth/token && ` + refresh)
	var c struct {
		OAuth map[string]any            `json:"claudeAiOauth"`
		MCP   map[string]map[string]any `json:"mcpOAuth"`
	}
	if err := json.Unmarshal([]byte(got), &c); err != nil {
		t.Fatal(err)
	}
	if c.OAuth["accessToken"] != "ssecca-dlo-e2e" || c.OAuth["refreshToken"] != "nekot-hserfer-e2e" || c.OAuth["scopes"] == nil || c.MCP["srv"]["accessToken"] != "e2e-mcp" {
		t.Errorf("the user's credentials after the refresh: %s (event %s)", got, ev)
	}
	if !strings.Contains(ev, `"carried":true`) || !strings.Contains(ev, `"token_host":"platform.claude.com"`) {
		t.Errorf("the carried-back event: %s", ev)
	}
	if fi, err := os.Lstat(filepath.Join(login, ".credentials.json")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("the carried-back credentials file: %v %v", fi.Mode(), err)
	}
	// The session stayed in the attempt, which removed its copy.
	if ents, _ := os.ReadDir(filepath.Join(login, "projects")); len(ents) != 1 || ents[0].Name() != "other" {
		t.Errorf("the run changed the user's projects/: %v", ents)
	}
	for _, secret := range []string{"ssecca-dlo-e2e", "nekot-hserfer-e2e", "e2e-old-access", "e2e-refresh-token", "e2e-mcp", realKey} {
		if hits := grepDir(t, filepath.Join(dir, ".kusaw"), secret); len(hits) > 0 {
			t.Errorf("%s is in the records: %v", secret, hits)
		}
	}
	verifyRecords(t, os.Geteuid(), dir)
}
