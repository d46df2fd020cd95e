package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A forge's answer reaches the user's terminal through kusaw deliver: a
// pull request URL carrying escape sequences (OSC 52 writes the clipboard)
// is printed with its control characters made visible.
func TestDeliverPrintsForgeTextSafely(t *testing.T) {
	const esc = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
	hostile := "https://forge.example/pull/1" + esc
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case "GET":
			w.Write([]byte("[]"))
		default:
			w.WriteHeader(201)
			json.NewEncoder(w).Encode(map[string]any{"number": 1, "html_url": hostile})
		}
	}))
	defer srv.Close()
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default:
    steps: [work]
    deliver:
      push: {remote: origin}
      pull_request: {forge: github, api_url: `+srv.URL+`, repo: acme/app, base: main, token: {secret: gh_token}}
steps:
  work:
    run: [sh, -c, 'echo done > work.txt']
`, "app")
	bare := filepath.Join(dir, "remote.git")
	git(t, dir, "init", "-q", "--bare", bare)
	git(t, filepath.Join(dir, "app"), "remote", "add", "origin", bare)
	set := exec.Command(kusawBin, "config", "set", "gh_token", "--secret")
	set.Dir, set.Env, set.Stdin = dir, testEnv(t, dir), strings.NewReader("gh-token-e2e\n")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("config set --secret: %v\n%s", err, out)
	}
	if res := runKusaw(t, dir, "run"); res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	out := runOnTerminal(t, dir, "deliver", id)
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\x07") {
		t.Fatalf("kusaw deliver wrote the forge's escape sequence to the terminal: %q", out)
	}
	// The twin: the URL is still printed, visibly, and a pipe gets it as is.
	if !strings.Contains(out, "pull request: https://forge.example/pull/1^[]52;c;") {
		t.Fatalf("kusaw deliver on a terminal: %q", out)
	}
	if res := runKusaw(t, dir, "deliver", id, "--json"); !strings.Contains(res.stdout, `\u001b]52`) {
		t.Fatalf("kusaw deliver --json: %s", res.stdout)
	}
}
