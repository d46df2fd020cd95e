package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPipelineEgressAllowlist runs a sandboxed step whose only way out is
// the proxy: an allowed host (a local server named localhost) works, a host
// not on the list is refused with 403 and recorded, and a connection that
// bypasses the proxy fails.
func TestPipelineEgressAllowlist(t *testing.T) {
	needSandbox(t)
	need(t, "curl")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello through the proxy") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	url := "http://localhost:" + port + "/ok"
	// A second host port no entry lists: the direct connection there
	// must fail, while the listed port is a local service the bridge
	// forwards.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "unlisted") }))
	defer other.Close()
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
sandbox:
  egress:
    allow: ["localhost:`+port+`"]
pipelines:
  default: [fetch]
steps:
  fetch:
    sandbox: {mode: required, network: allowlist}
    run:
      - sh
      - -c
      - |
        curl -sf --noproxy '' -x "$HTTP_PROXY" `+url+` > got.txt || exit 11
        curl -s --noproxy '' -x "$HTTP_PROXY" -o /dev/null -w '%{http_code}' http://evil.example/ > code.txt
        if curl -sf -m 3 --noproxy '*' http://127.0.0.1:`+otherPort+`/ >/dev/null 2>&1; then echo direct > direct.txt; else echo blocked > direct.txt; fi
        curl -sf -m 3 --noproxy '*' `+url+` > local.txt || echo unreached > local.txt
`, "app")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	app := filepath.Join(dir, "app")
	if got := git(t, app, "show", "kusaw/"+id+":got.txt"); got != "hello through the proxy" {
		t.Errorf("allowed host: %q", got)
	}
	if got := git(t, app, "show", "kusaw/"+id+":code.txt"); got != "403" {
		t.Errorf("host not on the list: status %q, want 403", got)
	}
	if got := git(t, app, "show", "kusaw/"+id+":direct.txt"); got != "blocked" {
		t.Errorf("a direct connection bypassing the proxy: %q", got)
	}
	if got := git(t, app, "show", "kusaw/"+id+":local.txt"); got != "hello through the proxy" {
		t.Errorf("the listed local-service port straight from the sandbox: %q", got)
	}
	if !strings.Contains(res.stderr, "evil.example:80 refused") {
		t.Errorf("kusaw run did not report the refusal on stderr:\n%s", res.stderr)
	}
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "fetch", "1")
	// The step's stderr ends with the refusal, worded as egress check
	// words it.
	const line = "kusaw: evil.example:80 is not allowed; add it to steps.fetch.sandbox.egress.allow"
	if serr := readFile(t, filepath.Join(adir, "stderr.log")); !strings.Contains(serr, "the egress proxy refused") || !strings.Contains(serr, line) {
		t.Errorf("stderr.log lacks the refusal:\n%s", serr)
	}
	if c := runKusaw(t, dir, "egress", "check", "--step", "fetch", "evil.example:80"); c.code != 8 || !strings.Contains(c.stdout, line) {
		t.Errorf("egress check words it otherwise: %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	elog := readFile(t, filepath.Join(adir, "egress.log"))
	if !strings.Contains(elog, `"host":"evil.example"`) || !strings.Contains(elog, `"decision":"refuse"`) || !strings.Contains(elog, `"decision":"allow"`) {
		t.Errorf("egress.log:\n%s", elog)
	}
	events := readFile(t, filepath.Join(adir, "events.jsonl"))
	for _, want := range []string{`"type":"egress.blocked"`, `"type":"egress.summary"`, `"bridged":true`} {
		if !strings.Contains(events, want) {
			t.Errorf("events lack %s", want)
		}
	}
	if att := readFile(t, filepath.Join(adir, "attempt.json")); !strings.Contains(att, `"host": "localhost:`+port+`"`) || !strings.Contains(att, `"origin": "factory"`) {
		t.Errorf("attempt.json allowlist:\n%s", att)
	}
	if v := runKusaw(t, dir, "log", "verify", "--strict", filepath.Join(adir, "egress.log"), filepath.Join(adir, "events.jsonl")); v.code != 0 {
		t.Errorf("kusaw log verify: %d %s%s", v.code, v.stdout, v.stderr)
	}
	if show := runKusaw(t, dir, "show", id); !strings.Contains(show.stdout, "1 refused") {
		t.Errorf("kusaw show lacks the egress line:\n%s", show.stdout)
	}
	if _, err := os.Stat(filepath.Join(adir, "lease")); err == nil {
		t.Error("the lease folder was left behind")
	}
}
