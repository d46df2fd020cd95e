package factory

import (
	"context"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/status"
)

// A failed step's fix names the run and the step it failed in, never the
// RUN and STEP of the reasons' table; the run's last line repeats it.
func TestFixNamesRunAndStep(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [checks]
steps:
  checks:
    attempts: 2
    run: [sh, -c, 'echo broken >&2; exit 3']
`, "app")
	e, err := New(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, _ := e.Run(context.Background(), "")
	if r.Record.State != status.RunFailed || r.Record.Reason != status.ReasonStepExitNonzero {
		t.Fatalf("run %s %s", r.Record.State, r.Record.Reason)
	}
	want := "kusaw logs " + r.ID() + " --step checks --attempt 2"
	if !strings.Contains(r.Record.Fix, want) {
		t.Errorf("run fix %q does not say %q", r.Record.Fix, want)
	}
	atts, _ := e.State.Attempts(r.Record)
	if len(atts) != 2 || !strings.Contains(atts[0].Fix, "kusaw logs "+r.ID()+" --step checks)") {
		t.Errorf("first attempt's fix: %+v", atts)
	}
	for _, fx := range []string{r.Record.Fix, atts[0].Fix, atts[1].Fix} {
		if strings.Contains(fx, "RUN") || strings.Contains(fx, "STEP") {
			t.Errorf("a placeholder is left in %q", fx)
		}
	}
}

// A tool that could not create its cache in the read-only home: the fix
// names the caches preset; with the cache given, it says nothing of it.
func TestFixNamesMissingCache(t *testing.T) {
	for _, tc := range []struct{ name, stderr, preset string }{
		{"go", "go: could not create module cache: mkdir /root/go: read-only file system", "go"},
		{"npm", "npm error enoent ENOENT: no such file or directory, mkdir '/root/.npm'", "npm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, have := range []bool{false, true} {
				caches := ""
				if have {
					caches = "caches: [" + tc.preset + "]\n"
				}
				f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
`+caches+`pipelines:
  default: [checks]
steps:
  checks:
    run: [sh, -c, "echo \"`+tc.stderr+`\" >&2; exit 1"]
`, "app")
				e, err := New(f, Options{})
				if err != nil {
					t.Fatal(err)
				}
				r, _ := e.Run(context.Background(), "")
				e.Close()
				named := strings.Contains(r.Record.Fix, "caches: ["+tc.preset+"]")
				if named == have {
					t.Errorf("cache given %v: run fix %q", have, r.Record.Fix)
				}
				if !strings.Contains(r.Record.Fix, r.ID()) {
					t.Errorf("run fix %q does not name the run", r.Record.Fix)
				}
			}
		})
	}
}

// An allowlist step whose connection the proxy refused: the fix names the
// host and the key that allows it instead of stderr.log (a failure with
// no refusal keeps the stderr.log fix: TestFixNamesRunAndStep).
func TestFixNamesRefusedHost(t *testing.T) {
	needSandboxAndCurl(t)
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [fetch]
steps:
  fetch:
    sandbox: {mode: required, network: allowlist}
    run: [sh, -c, 'curl -sf --noproxy "" -x "$HTTP_PROXY" http://pkg.blocked.example:8080/ >/dev/null; exit 1']
`, "app")
	e, err := New(f, Options{Kusaw: kusawBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, _ := e.Run(context.Background(), "")
	if r.Record.State != status.RunFailed {
		t.Fatalf("run %s: %s", r.Record.State, r.Record.Message)
	}
	for _, w := range []string{"pkg.blocked.example:8080", "steps.fetch.sandbox.egress.allow", "kusaw egress check pkg.blocked.example:8080 --step fetch"} {
		if !strings.Contains(r.Record.Fix, w) {
			t.Errorf("run fix %q does not say %q", r.Record.Fix, w)
		}
	}
	if strings.Contains(r.Record.Fix, "stderr.log") {
		t.Errorf("run fix still points at stderr.log: %q", r.Record.Fix)
	}
}
