package e2e

import (
	"crypto/tls"
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

// The real Claude Code CLI, run by kusaw in its sandbox with inject, against
// a fake Messages API on the host's https://localhost:PORT (a local
// gateway): base_url on localhost is a local service, so the factory needs
// no allow_ranges and no extra entry. The API gets the real key; the CLI
// only ever holds the placeholder.
func TestRealClaudeCodeLocalAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real Claude Code")
	}
	needSandbox(t)
	bin, version := providertest.InstallClaude(t)
	t.Logf("Claude Code %s at %s", version, bin)
	const realKey = "sk-ant-e2e-local-gateway-key-0815"
	const text = "pong from the local gateway"
	api := providertest.NewMessagesAPI(t, text)
	api.WantKey = realKey
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
  claude-code: {command: `+bin+`, base_url: "https://localhost:`+port+`"}
sandbox:
  egress:
    inject: provider
pipelines:
  default: [ask]
steps:
  ask:
    prompt: reply with the word pong
    sandbox: {mode: required, network: allowlist}
    env:
      DISABLE_TELEMETRY: "1"
      DISABLE_ERROR_REPORTING: "1"
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
      DISABLE_AUTOUPDATER: "1"
`, "app")
	if strings.Contains(readFile(t, filepath.Join(dir, "factory.yaml")), "allow_ranges") {
		t.Fatal("the factory must not need allow_ranges")
	}
	set := exec.Command(kusawBin, "config", "set", "providers.claude-code.api_key", "--secret")
	set.Dir = dir
	set.Env = testEnv(t, dir)
	set.Stdin = strings.NewReader(realKey + "\n")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("kusaw config set --secret: %v\n%s", err, out)
	}
	// The user's login folder, as Claude Code leaves it: a login, settings,
	// a session of another project. The attempt gets its own copy.
	login := filepath.Join(dir, "home", ".claude")
	const creds = `{"claudeAiOauth":{"accessToken":"e2e-unused","refreshToken":"e2e-unused","expiresAt":4102444800000}}`
	writeFile(t, filepath.Join(login, ".credentials.json"), creds)
	writeFile(t, filepath.Join(login, "settings.json"), `{"env":{"DISABLE_AUTOUPDATER":"1"}}`)
	writeFile(t, filepath.Join(login, "projects", "other", "s.jsonl"), "the user's other session\n")
	res := runKusawEnv(t, dir, []string{"SSL_CERT_FILE=" + fx.caPEM}, "run")
	id := onlyRun(t, dir)
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "ask", "1")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s\nstderr.log: %s\negress.log: %s", res.code, res.stdout, res.stderr,
			readFile(t, filepath.Join(adir, "stderr.log")), readFile(t, filepath.Join(adir, "egress.log")))
	}
	posts := 0
	for _, r := range api.Requests() {
		if r.Method == "POST" && strings.HasPrefix(r.Path, "/v1/messages") {
			posts++
			if r.Header.Get("x-api-key") != realKey || strings.Contains(string(r.Body), "factory-egress-placeholder") {
				t.Fatalf("the API got key %q", r.Header.Get("x-api-key"))
			}
		}
	}
	if posts == 0 {
		t.Fatal("the prompt never reached the API")
	}
	if out := readFile(t, filepath.Join(adir, "stdout.log")); !strings.Contains(out, text) {
		t.Errorf("the agent's answer did not come from the API:\n%s", out)
	}
	elog := readFile(t, filepath.Join(adir, "egress.log"))
	if !strings.Contains(elog, `"kind":"inject"`) || !strings.Contains(elog, `"host":"localhost"`) || strings.Contains(elog, "address.refused") {
		t.Errorf("egress.log: want the inject to localhost, no address refusal:\n%s", elog)
	}
	// Its session state stayed in the attempt: nothing new in the user's
	// folder, the login is as it was, the attempt's copy is gone.
	ents, _ := os.ReadDir(filepath.Join(login, "projects"))
	if len(ents) != 1 || readFile(t, filepath.Join(login, ".credentials.json")) != creds {
		t.Errorf("the run changed the user's login folder: projects %v, credentials %q", ents, readFile(t, filepath.Join(login, ".credentials.json")))
	}
	if _, err := os.Stat(filepath.Join(adir, "login")); err == nil {
		if left, _ := os.ReadDir(filepath.Join(adir, "login")); len(left) > 0 {
			t.Errorf("the attempt's login copy is left in its records: %v", left)
		}
	}
	if hits := grepDir(t, filepath.Join(dir, ".kusaw"), "e2e-unused"); len(hits) > 0 {
		t.Errorf("the login is in the records: %v", hits)
	}
	if hits := grepDir(t, filepath.Join(dir, ".kusaw"), realKey); len(hits) > 0 {
		t.Errorf("the real key is in the records: %v", hits)
	}
}
