package factory

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

var (
	kusawOnce sync.Once
	kusawPath string
	kusawErr  error
)

// kusawBinary builds the kusaw command once: the egress bridge and the
// built-in steps run as `kusaw __...` inside the sandbox.
func kusawBinary(t *testing.T) string {
	t.Helper()
	kusawOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kusaw-factory-test-")
		if err != nil {
			kusawErr = err
			return
		}
		kusawPath = filepath.Join(dir, "kusaw")
		out, err := exec.Command("go", "build", "-o", kusawPath, "../cmd/kusaw").CombinedOutput()
		if err != nil {
			kusawErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if kusawErr != nil {
		t.Fatal(kusawErr)
	}
	return kusawPath
}

func needSandboxAndCurl(t *testing.T) {
	t.Helper()
	var missing string
	if res := sandbox.Check(); !res.Available {
		missing = "the sandbox backend: " + res.Msg
	} else if _, err := exec.LookPath("curl"); err != nil {
		missing = "curl"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("missing %s", missing)
		}
		t.Skipf("missing %s", missing)
	}
}

// TestInjectKeepsKeyOutside: the step reaches an API through the lease's
// inject endpoint with the placeholder key; the proxy adds the real key,
// which never enters the sandbox or the run's files.
func TestInjectKeepsKeyOutside(t *testing.T) {
	needSandboxAndCurl(t)
	const realKey = "sk-real-7d1c9e4b2a"
	var sawKey string
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawKey = r.Header.Get("x-api-key")
		if sawKey != realKey {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "api says hi")
	}))
	cert, pool := localhostCert(t)
	api.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	api.StartTLS()
	defer api.Close()
	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
sandbox:
  egress:
    allow_ranges: [127.0.0.0/8]
pipelines:
  default: [call]
steps:
  call:
    sandbox:
      mode: required
      network: allowlist
      egress:
        inject:
          - {host: localhost, header: x-api-key, secret: api.key, base_url: "https://localhost:`+port+`", base_url_env: API_BASE, key_env: API_KEY}
    run: [sh, -c, 'echo "key=$API_KEY"; env | grep -c sk-real- || true; curl -sf -H "x-api-key: $API_KEY" "$API_BASE/v1/hello" > answer.txt']
`, "app")
	e, err := New(f, Options{Secrets: fakeSecrets{"api.key": realKey}, InjectRootCAs: pool, Kusaw: kusawBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, _ := e.Run(context.Background(), "")
	adir := e.State.AttemptDir(r.ID(), "call", 1)
	out, _ := os.ReadFile(filepath.Join(adir, record.StdoutFile))
	if r.Record.State != status.RunSucceeded {
		errOut, _ := os.ReadFile(filepath.Join(adir, record.StderrFile))
		elog, _ := os.ReadFile(filepath.Join(adir, record.EgressLogFile))
		t.Fatalf("run %s: %s\nstdout %s\nstderr %s\negress.log %s", r.Record.State, r.Record.Message, out, errOut, elog)
	}
	if string(out) != "key=factory-egress-placeholder\n0\n" {
		t.Errorf("the step saw: %q (want the placeholder and no real key in its env)", out)
	}
	if sawKey != realKey {
		t.Errorf("the API got key %q", sawKey)
	}
	if got := testkit.GitRun(t, filepath.Join(f.Dir, "app"), "show", "kusaw/"+r.ID()+":answer.txt"); got != "api says hi" {
		t.Errorf("answer %q", got)
	}
	if leaks := grepTree(t, r.Dir, realKey); len(leaks) > 0 {
		t.Errorf("the real key appears in %v", leaks)
	}
	if elog, _ := os.ReadFile(filepath.Join(adir, record.EgressLogFile)); !strings.Contains(string(elog), `"kind":"inject"`) {
		t.Errorf("egress.log has no inject decision:\n%s", elog)
	}
}

// localhostCert makes a self-signed certificate for the name localhost
// (httptest's own names only example.com and IP addresses).
func localhostCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestEgressBlockedEventsCapped: every refusal is in egress.log, but only
// the first 50 become events; the summary counts the rest.
func TestEgressBlockedEventsCapped(t *testing.T) {
	needSandboxAndCurl(t)
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [noisy]
steps:
  noisy:
    sandbox: {mode: required, network: allowlist}
    run: [sh, -c, 'u=""; i=0; while [ $i -lt 55 ]; do u="$u http://h$i.blocked.example/"; i=$((i+1)); done; curl -s --noproxy "" -x "$HTTP_PROXY" $u > /dev/null']
`, "app")
	e, err := New(f, Options{Kusaw: kusawBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, _ := e.Run(context.Background(), "")
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", r.Record.State, r.Record.Message)
	}
	adir := e.State.AttemptDir(r.ID(), "noisy", 1)
	events, _ := os.ReadFile(filepath.Join(adir, record.EventsFile))
	if n := strings.Count(string(events), `"type":"egress.blocked"`); n != attempt.MaxBlockedEvents {
		t.Errorf("%d egress.blocked events, want %d", n, attempt.MaxBlockedEvents)
	}
	if !strings.Contains(string(events), `"blocked_not_shown":5`) {
		t.Errorf("the summary does not count the refusals beyond the cap")
	}
	elog, _ := os.ReadFile(filepath.Join(adir, record.EgressLogFile))
	if n := strings.Count(string(elog), `"decision":"refuse"`); n != 55 {
		t.Errorf("egress.log has %d refusals, want 55", n)
	}
	if lines, n := r.EgressRefusals(); n != 55 || len(lines) != 20 {
		t.Errorf("run refusals: %d counted, %d listed", n, len(lines))
	}
}

// An allowlist attempt makes its egress.log beside the git work, before
// the lease needs it; when the attempt ends earlier (here its worktree
// cannot be made) the log is still closed with its final seal.
func TestEarlyEgressLogClosedWhenAttemptEndsEarly(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [fetch]
steps:
  fetch:
    sandbox: {mode: required, network: allowlist, egress: {allow: [registry.example.com]}}
    run: ["true"]
`, "app")
	var e *Engine
	block := func(ev record.Event) {
		if ev.Type == record.EvAttemptStarted {
			// A file where git would put the worktree.
			p := filepath.Join(e.State.AttemptDir(ev.Run, ev.Step, ev.Attempt), record.WorktreesDir, "app")
			_ = os.WriteFile(p, []byte("in the way\n"), 0o600)
		}
	}
	e, err := New(f, Options{Kusaw: "/bin/false", OnEvent: block})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, _ := e.Run(context.Background(), "")
	adir := e.State.AttemptDir(r.ID(), "fetch", 1)
	var a record.AttemptRecord
	if err := readJSON(filepath.Join(adir, record.AttemptFile), &a); err != nil {
		t.Fatal(err)
	}
	if a.Reason != status.ReasonWorktreeFailed {
		t.Fatalf("the attempt ended %s %s (%s); the test needs its worktree to fail", a.Outcome, a.Reason, a.Message)
	}
	res, err := chainlog.VerifyFile(filepath.Join(adir, record.EgressLogFile), e.PublicKey(),
		chainlog.Binding{Run: r.ID(), Step: "fetch", Attempt: 1, Kind: chainlog.KindEgress})
	if err != nil || !res.Final {
		t.Errorf("egress.log made early is not closed: %+v %v", res, err)
	}
}
