package e2e

import (
	"crypto/tls"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/providers/providertest"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

// An agent step with inject runs on a worker: the worker's own proxy puts
// the real API key on the agent's requests, the key reaching that worker
// only sealed to its key. The API gets the real key; the key is in clear
// nowhere on disk: not in serve's records, not in JetStream's store files,
// not in the worker's folder.
func TestClusterInjectOnWorker(t *testing.T) {
	need(t, "git")
	need(t, "go")
	sb := clusterSandbox(t)
	fakes := providertest.BuildT(t)
	const realKey = "sk-ant-cluster-REAL-key-5813"
	api := providertest.NewMessagesAPI(t, "answer from the fake API")
	api.WantKey = realKey
	// What the worker runs must be readable by its uid: the fake agent
	// and the CA its proxy verifies the API's front with.
	shared, err := os.MkdirTemp("/var/tmp", "kusaw-inject-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	os.Chmod(shared, 0o755)
	claude := filepath.Join(shared, "claude")
	writeFile(t, claude, readFile(t, fakes.Claude))
	os.Chmod(claude, 0o755)
	fx := &egressFixture{tools: shared}
	fx.makeCA(t)
	os.Chmod(fx.caPEM, 0o644)
	target, _ := url.Parse(api.URL)
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{fx.leaf}}
	front.StartTLS()
	t.Cleanup(front.Close)
	_, port, _ := net.SplitHostPort(front.Listener.Addr().String())
	r := startClusterServe(t, `version: 1
repos:
  app: {path: app}
serve:
  cluster: {listen: "127.0.0.1:0", local_worker: false}
providers:
  claude-code: {command: `+claude+`, base_url: "https://localhost:`+port+`"}
sandbox:
  egress:
    inject: provider
pipelines:
  default: [ask]
steps:
  ask:
    prompt: say something
    sandbox: {mode: `+sb+`, network: allowlist}
    env:
      FAKE_AGENT_SCENARIO: call_api
`)
	if err := secretstore.OpenDir(filepath.Join(r.dir, "secrets")).Set("providers.claude-code.api_key", realKey); err != nil {
		t.Fatal(err)
	}
	w := r.startWorkerEnv(t, "inj", []string{"SSL_CERT_FILE=" + fx.caPEM})
	r.waitWorkers(t, 1)
	ids := r.submit(t, 1)
	d := waitDetail(t, r.sp.client, ids[0], 2*time.Minute)
	if d.Run.State != status.RunSucceeded {
		for _, a := range d.Attempts {
			t.Logf("attempt %s/%d on %q: %s %s %s", a.Step, a.Number, a.Worker, a.Outcome, a.Reason, a.Message)
		}
		t.Fatalf("run: %s %s", d.Run.State, d.Run.Message)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Worker != "inj" {
		t.Fatalf("attempts %+v: want one, on worker inj", d.Attempts)
	}
	reqs := api.Requests()
	if len(reqs) == 0 || reqs[len(reqs)-1].Header.Get("x-api-key") != realKey {
		t.Fatalf("the API did not receive the real key: %d request(s)", len(reqs))
	}
	adir := filepath.Join(r.dir, ".kusaw", "runs", ids[0], "steps", "ask", "1")
	if !strings.Contains(readFile(t, filepath.Join(adir, "egress.log")), `"kind":"inject"`) {
		t.Errorf("the worker's egress.log has no inject decision")
	}
	for _, root := range []string{filepath.Join(r.dir, ".kusaw"), w.state} {
		if hits := grepDir(t, root, realKey); len(hits) > 0 {
			t.Errorf("the inject key is in clear on disk: %v", hits)
		}
	}
	if _, err := os.Stat(filepath.Join(r.dir, ".kusaw", "cluster", "jetstream")); err != nil {
		t.Errorf("JetStream's store was not where the grep looked: %v", err)
	}
}
