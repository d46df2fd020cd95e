package factory

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

func parseFactory(t *testing.T, yaml string) *config.Factory {
	t.Helper()
	f, fs := config.Parse([]byte(yaml), filepath.Join(t.TempDir(), "factory.yaml"))
	if len(fs.Errors()) > 0 {
		t.Fatalf("factory: %v", fs.Errors())
	}
	return f
}

// W7: kusaw's own HTTPS_PROXY is never used implicitly; validate says so,
// with the fix, and never prints the proxy's credentials.
func TestValidateEnvProxyWarning(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	const base = "version: 1\nrepos: {}\npipelines: {default: [a]}\nsteps:\n  a: {run: [\"true\"], sandbox: {mode: required, network: %s}}\n"
	for _, c := range []struct {
		network, extra string
		env            map[string]string
		want           bool
	}{
		{"allowlist", "", map[string]string{"HTTPS_PROXY": "http://me:pw@proxy.corp.example:3128"}, true},
		{"audit", "", map[string]string{"http_proxy": "http://proxy.corp.example:3128"}, true},
		{"allowlist", "", map[string]string{}, false},
		{"open", "", map[string]string{"HTTPS_PROXY": "http://proxy.corp.example:3128"}, false},
		{"allowlist", "sandbox: {egress: {upstream_proxy: \"http://proxy.corp.example:3128\"}}\n", map[string]string{"HTTPS_PROXY": "http://proxy.corp.example:3128"}, false},
	} {
		f := parseFactory(t, strings.Replace(base, "%s", c.network, 1)+c.extra)
		v := &Validator{Getenv: env(c.env)}
		r := v.Validate(f, nil)
		var got *config.Finding
		for i := range r.Warnings {
			if r.Warnings[i].Code == config.WCodeEnvProxy {
				got = &r.Warnings[i]
			}
		}
		if (got != nil) != c.want {
			t.Fatalf("network %s env %v extra %q: W7 %v, want %v", c.network, c.env, c.extra, got, c.want)
		}
		if got != nil && (strings.Contains(got.Message+got.Fix, "pw") || !strings.Contains(got.Fix, "upstream_proxy: http://proxy.corp.example:3128")) {
			t.Fatalf("W7: %s (fix: %s)", got.Message, got.Fix)
		}
	}
}

// validate lists the host loopback ports a step's local-service entries
// lease.
func TestValidateLocalPorts(t *testing.T) {
	f := parseFactory(t, `version: 1
repos: {}
sandbox: {egress: {allow: ["localhost:5432", "api.example.com"]}}
pipelines: {default: [a, b]}
steps:
  a: {run: ["true"], sandbox: {mode: required, network: allowlist, egress: {allow: ["127.0.0.1:7000-7002", "[::1]:5432"]}}}
  b: {run: ["true"], sandbox: {mode: required, network: open}}
`)
	r := (&Validator{}).Validate(f, nil)
	if len(r.Steps) != 2 || !reflect.DeepEqual(r.Steps[0].LocalPorts, []int{5432, 7000, 7001, 7002}) || r.Steps[1].LocalPorts != nil {
		t.Fatalf("steps: %+v", r.Steps)
	}
}

// A step that requires network while its network is open is told once,
// by the loader's own code; the provider's matrix does not say it again
// (known by its capability, not by its text). The twin: a capability the
// loader does not check (inject, here off) is reported from the matrix.
func TestValidateRequiresReportedOnce(t *testing.T) {
	f, fs := config.Parse([]byte(`version: 1
repos: {}
pipelines: {default: [a]}
steps:
  a: {agent: claude-code, prompt: hi, requires: [network, inject], sandbox: {mode: required, network: open}}
`), filepath.Join(t.TempDir(), "factory.yaml"))
	r := NewValidator().Validate(f, fs)
	open, network, inject := 0, 0, 0
	for _, e := range r.Errors {
		switch {
		case e.Code == config.ECodeNetworkOpen:
			open++
		case e.Code == config.ECodeCapMissing && strings.Contains(e.Message, "requires network"):
			network++
		case e.Code == config.ECodeCapMissing && strings.Contains(e.Message, "requires inject"):
			inject++
		}
	}
	if open != 1 || network != 0 || inject != 1 {
		t.Errorf("network open %d, network from the matrix %d, inject %d; want 1, 0, 1: %+v", open, network, inject, r.Errors)
	}
}
