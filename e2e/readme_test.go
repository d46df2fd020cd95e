package e2e

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/providers/providertest"
)

// TestReadmeOwnRepository follows the README's "On your own repository"
// section command by command, with the real Claude Code replaced by the
// fake CLI and the Messages API by a local fake behind TLS: install with
// make install (and go install), init --sandbox, validate, store the key,
// set the prompt, run, show, log verify, then serve's web page with a
// token. Each command it runs must still be in the README.
func TestReadmeOwnRepository(t *testing.T) {
	needSandbox(t)
	need(t, "make")
	need(t, "go")
	readme := readFile(t, filepath.Join(repoRoot(), "README.md"))
	i := strings.Index(readme, "## On your own repository")
	if i < 0 {
		t.Fatal("README has no 'On your own repository' section")
	}
	section := readme[i:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	inReadme := func(cmd string) {
		t.Helper()
		if !strings.Contains(section, cmd) {
			t.Fatalf("the README section no longer says %q: change this test with it", cmd)
		}
	}

	// Install: make install into a prefix, and go install from the checkout.
	top := t.TempDir()
	prefix := filepath.Join(top, "prefix")
	inReadme("make install")
	mk := exec.Command("make", "-s", "install", "PREFIX="+prefix, "BIN="+filepath.Join(top, "build", "kusaw"))
	mk.Dir = repoRoot()
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	kusaw := filepath.Join(prefix, "bin", "kusaw")
	for _, b := range []string{kusaw, filepath.Join(prefix, "bin", "kusaw-bridge"), filepath.Join(prefix, "bin", "kusaw-daemon")} {
		if fi, err := os.Stat(b); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("make install did not install %s: %v", b, err)
		}
	}
	inReadme("go install ./cmd/...")
	gobin := filepath.Join(top, "gobin")
	gi := exec.Command("go", "install", "./cmd/...")
	gi.Dir = repoRoot()
	gi.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-buildvcs=false")
	if out, err := gi.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	for _, b := range []string{"kusaw", "kusaw-bridge", "kusaw-daemon"} {
		if _, err := os.Stat(filepath.Join(gobin, b)); err != nil {
			t.Errorf("go install ./cmd/... did not install %s", b)
		}
	}

	// The user's repository, with its own tests.
	repo := newRepo(t, top, "your-repo")
	writeFile(t, filepath.Join(repo, "Makefile"), "test:\n\t@echo your tests passed\n")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "tests")
	env := testEnv(t, top)
	run := func(stdin string, args ...string) result {
		t.Helper()
		cmd := exec.Command(kusaw, args...)
		cmd.Dir, cmd.Env = repo, env
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		r := result{out.String(), errb.String(), exitCode(err)}
		if r.code != 0 {
			t.Fatalf("kusaw %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}
	inReadme("kusaw init --sandbox")
	run("", "init", "--sandbox")
	inReadme("kusaw validate")
	run("", "validate")

	// Test-only: the fake CLI instead of claude, and the fake API behind
	// TLS with the test's CA instead of api.anthropic.com.
	fakes := providertest.BuildT(t)
	const realKey = "sk-ant-readme-REAL-key-0815"
	api := providertest.NewMessagesAPI(t, "done, from the fake API")
	api.WantKey = realKey
	fx := &egressFixture{tools: t.TempDir()}
	fx.makeCA(t)
	target, _ := url.Parse(api.URL)
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{fx.leaf}}
	front.StartTLS()
	t.Cleanup(front.Close)
	_, port, _ := net.SplitHostPort(front.Listener.Addr().String())
	env = append(env, "SSL_CERT_FILE="+fx.caPEM)
	run("", "config", "set", "providers.claude-code.command", fakes.Claude)
	run("", "config", "set", "providers.claude-code.base_url", "https://localhost:"+port)
	run("", "config", "set", "steps.implement.env.FAKE_AGENT_SCENARIO", "call_api")

	inReadme("kusaw config set providers.claude-code.api_key --secret")
	run(realKey+"\n", "config", "set", "providers.claude-code.api_key", "--secret")
	inReadme(`kusaw config set steps.implement.prompt "Add a --version flag to the CLI"`)
	run("", "config", "set", "steps.implement.prompt", "Add a --version flag to the CLI")
	if f := readFile(t, filepath.Join(repo, "factory.yaml")); strings.Contains(f, realKey) || !strings.Contains(f, "Add a --version flag") {
		t.Fatalf("factory.yaml after config set:\n%s", f)
	}

	inReadme("kusaw run ")
	r := run("", "run")
	m := regexp.MustCompile(`run (\S+) succeeded`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("kusaw run did not say which run succeeded:\n%s", r.stdout)
	}
	id := m[1]
	if reqs := api.Requests(); len(reqs) == 0 || reqs[len(reqs)-1].Header.Get("x-api-key") != realKey {
		t.Errorf("the API did not get the stored key through inject")
	}
	if got := readFile(t, filepath.Join(repo, ".kusaw", "runs", id, "steps", "checks", "1", "stdout.log")); !strings.Contains(got, "your tests passed") {
		t.Errorf("checks did not run the repository's tests: %q", got)
	}
	inReadme("kusaw show RUN")
	if s := run("", "show", id); !strings.Contains(s.stdout, "implement") || !strings.Contains(s.stdout, "checks") {
		t.Errorf("kusaw show:\n%s", s.stdout)
	}
	inReadme("kusaw log verify .kusaw/runs/RUN/events.jsonl .kusaw/runs/RUN/steps/implement/1/egress.log")
	run("", "log", "verify", ".kusaw/runs/"+id+"/events.jsonl", ".kusaw/runs/"+id+"/steps/implement/1/egress.log")
	if hits := grepDir(t, filepath.Join(repo, ".kusaw"), realKey); len(hits) > 0 {
		t.Errorf("the key is in the records: %v", hits)
	}

	// The web page.
	inReadme("kusaw config set serve.token --secret")
	const token = "readme-token-0123456789abcdef"
	run(token+"\n", "config", "set", "serve.token", "--secret")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	inReadme("kusaw serve --listen 127.0.0.1:7300")
	srv := exec.Command(kusaw, "serve", "--listen", addr)
	srv.Dir, srv.Env = repo, env
	var logs syncBuffer
	srv.Stderr = &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() })
	inReadme("http://127.0.0.1:7300/?token=TOKEN")
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	var page string
	waitFor(t, "the web page", 20*time.Second, func() bool {
		resp, err := client.Get("http://" + addr + "/?token=" + token)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(strings.ToLower(page), "<html") {
		t.Errorf("the web page is not HTML:\n%.300s", page)
	}
	resp, err := client.Get("http://" + addr + "/v1/runs")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), id) {
		t.Errorf("the page's API (with the token's cookie) does not list the run: %d %.300s\n%s", resp.StatusCode, b, logs.String())
	}
}
