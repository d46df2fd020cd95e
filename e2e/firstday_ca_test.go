package e2e

import (
	"crypto/tls"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/providers/providertest"
)

// A provider's base_url behind a private CA (issue 27): without
// providers.NAME.ca_file the proxy refuses the upstream's certificate and
// answers so that the CLI stops at once (one refusal in egress.log, not a
// retry loop), and kusaw's last line names the cause and ca_file; with
// ca_file set (kusaw config set) the same run reaches the API with the
// key. kusaw's own environment does not trust the CA (no SSL_CERT_FILE).
// The real Claude Code when -short is not given, the fake CLI otherwise.
func TestFirstDayPrivateCAProvider(t *testing.T) {
	needSandbox(t)
	cli := ""
	if testing.Short() {
		cli = providertest.BuildT(t).Claude
	} else {
		cli, _ = providertest.InstallClaude(t)
	}
	const realKey = "sk-ant-private-ca-key-4242"
	api := providertest.NewMessagesAPI(t, "pong through the private CA")
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
  claude-code: {command: `+cli+`, base_url: "https://localhost:`+port+`"}
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
      FAKE_AGENT_SCENARIO: call_api
      DISABLE_TELEMETRY: "1"
      DISABLE_ERROR_REPORTING: "1"
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
      DISABLE_AUTOUPDATER: "1"
`, "app")
	if r := kusawStdin(t, dir, realKey+"\n", "config", "set", "providers.claude-code.api_key", "--secret"); r.code != 0 {
		t.Fatalf("config set --secret: %d %s", r.code, r.stderr)
	}
	r := runKusaw(t, dir, "run")
	if r.code == 0 {
		t.Fatalf("a run against an upstream of an untrusted CA passed:\n%s%s", r.stdout, r.stderr)
	}
	id := onlyRun(t, dir)
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "ask", "1")
	out := strings.TrimSpace(r.stdout + r.stderr)
	last := out[strings.LastIndex(out, "\n")+1:]
	if !strings.Contains(out, "egress.upstream_untrusted") || !strings.Contains(out, "localhost:"+port+" refused") || !strings.Contains(last, "providers.claude-code.ca_file") {
		t.Errorf("kusaw's output does not name the cause and the fix (last line %q):\n%s", last, out)
	}
	elog := readFile(t, filepath.Join(adir, "egress.log"))
	if n := strings.Count(elog, `"reason":"upstream.tls_untrusted"`); n != 1 {
		t.Errorf("the CLI asked %d time(s) through the untrusted upstream, want once (it must stop, not retry):\n%s", n, elog)
	}
	if n := len(api.Requests()); n != 0 {
		t.Errorf("the API behind the untrusted certificate got %d request(s)", n)
	}

	// The twin: the CA trusted through providers.claude-code.ca_file.
	if s := runKusaw(t, dir, "config", "set", "providers.claude-code.ca_file", fx.caPEM); s.code != 0 {
		t.Fatalf("config set ca_file: %d %s", s.code, s.stderr)
	}
	if v := runKusaw(t, dir, "validate"); v.code != 0 {
		t.Fatalf("validate with ca_file: %d %s%s", v.code, v.stdout, v.stderr)
	}
	if r := runKusaw(t, dir, "run"); r.code != 0 {
		t.Fatalf("the run with ca_file: %d\n%s%s\nfactory.yaml:\n%s", r.code, r.stdout, r.stderr, readFile(t, filepath.Join(dir, "factory.yaml")))
	}
	reqs := api.Requests()
	if len(reqs) == 0 || reqs[len(reqs)-1].Header.Get("x-api-key") != realKey {
		t.Errorf("with ca_file the API did not get the key (%d requests)", len(reqs))
	}
	if hits := grepDir(t, filepath.Join(dir, ".kusaw"), realKey); len(hits) > 0 {
		t.Errorf("the key is in the records: %v", hits)
	}
}

// TestFirstDayBaseURLValidate: validate refuses a base_url the run's
// inject would refuse (http://, credentials), with the proxy's own words,
// and the run refuses it before any attempt with the same line; an http://
// base_url without inject (the CLI goes there itself) stays valid; a
// ca_file that is no PEM file is refused.
func TestFirstDayBaseURLValidate(t *testing.T) {
	base := `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {base_url: "BASE"CA}
sandbox: {mode: required, network: allowlist, egress: {INJECT}}
pipelines:
  default: [ask]
steps:
  ask: {prompt: do it, provider: claude-code}
`
	mk := func(baseURL, ca, inject string) string {
		y := strings.NewReplacer("BASE", baseURL, "CA", ca, "INJECT", inject).Replace(base)
		return factoryDir(t, y, "app")
	}
	const words = `providers.claude-code.base_url: base URL "http://gw.corp.example:8080" must be an https:// URL without credentials, query or fragment`
	dir := mk("http://gw.corp.example:8080", "", "inject: provider")
	v := runKusaw(t, dir, "validate")
	if v.code != 3 || !strings.Contains(v.stdout+v.stderr, "E043") || !strings.Contains(v.stdout+v.stderr, words) {
		t.Errorf("validate of an http:// inject base_url: %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	r := runKusaw(t, dir, "run")
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, words) {
		t.Errorf("run of an http:// inject base_url: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := filepath.Glob(filepath.Join(dir, ".kusaw", "runs", "*", "steps")); err == nil {
		if m, _ := filepath.Glob(filepath.Join(dir, ".kusaw", "runs", "*", "steps", "ask")); len(m) > 0 {
			t.Errorf("an attempt started: %v", m)
		}
	}
	dir = mk("https://user:pw@gw.corp.example", "", "inject: provider")
	if v := runKusaw(t, dir, "validate"); v.code != 3 || !strings.Contains(v.stdout+v.stderr, "must be an https:// URL without credentials") || strings.Contains(v.stdout+v.stderr, ":pw@") {
		t.Errorf("validate of a base_url with credentials: %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	dir = mk("http://gw.corp.example:8080", "", "allow: [\"gw.corp.example:8080\"]")
	if v := runKusaw(t, dir, "validate"); strings.Contains(v.stdout+v.stderr, "E043") {
		t.Errorf("an http:// base_url without inject was refused:\n%s%s", v.stdout, v.stderr)
	}
	dir = mk("https://gw.corp.example", ", ca_file: ./app/README", "inject: provider")
	if v := runKusaw(t, dir, "validate"); v.code != 3 || !strings.Contains(v.stdout+v.stderr, "E048") || !strings.Contains(v.stdout+v.stderr, "providers.claude-code.ca_file") {
		t.Errorf("a ca_file that is no PEM file: %d\n%s%s", v.code, v.stdout, v.stderr)
	}
}

// kusawStdin runs the binary in dir with stdin.
func kusawStdin(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = testEnv(t, dir)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && exitCode(err) < 0 {
		t.Fatalf("kusaw %v: %v", args, err)
	}
	return result{out.String(), errb.String(), exitCode(err)}
}

// TestFirstDayDoctorProviderLocalPort: a provider whose base_url is a
// local service (https://localhost:PORT, something listening there):
// validate passes, egress check says the step reaches it directly, and
// sandbox doctor's P8 reaches it straight from the sandbox, as the step
// would (doctor's probe run used to lose the provider's settings, so its
// sandbox had no such port and P8 failed).
func TestFirstDayDoctorProviderLocalPort(t *testing.T) {
	needSandbox(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {base_url: "https://localhost:`+port+`"}
sandbox:
  mode: required
  network: allowlist
  egress: {inject: provider, provider_hosts: true}
pipelines:
  default: [implement]
steps:
  implement: {provider: claude-code, prompt: do it}
`, "app")
	if r := kusawStdin(t, dir, "sk-unused\n", "config", "set", "providers.claude-code.api_key", "--secret"); r.code != 0 {
		t.Fatalf("config set: %d %s", r.code, r.stderr)
	}
	if v := runKusaw(t, dir, "validate"); v.code != 0 {
		t.Fatalf("validate: %d %s%s", v.code, v.stdout, v.stderr)
	}
	c := runKusaw(t, dir, "egress", "check", "--step", "implement", "localhost:"+port)
	if c.code != 0 || !strings.Contains(c.stdout, "directly on its own localhost:"+port) {
		t.Errorf("egress check: %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	d := runKusaw(t, dir, "sandbox", "doctor", "--step", "implement")
	if !strings.Contains(d.stdout, "P8 pass") || !strings.Contains(d.stdout, "the step's local services reached: 127.0.0.1:"+port) {
		t.Errorf("doctor's P8 disagrees with egress check: %d\n%s%s", d.code, d.stdout, d.stderr)
	}
	if strings.Contains(d.stdout, "P7 fail") {
		t.Errorf("P7 (a port no entry lists) is reached now:\n%s", d.stdout)
	}
}
