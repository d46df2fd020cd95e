package factory

import (
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

// W12: a step outside the sandbox after a sandboxed one runs the sandboxed
// step's code on the host; validate warns on the later step, with the fix.
// Members of one parallel group do not count as before each other.
func TestValidateUnsandboxedAfterSandboxed(t *testing.T) {
	const steps = `steps:
  a: {run: ["true"], sandbox: required}
  b: {run: ["true"], sandbox: "off"}
  c: {run: ["true"], sandbox: required}
`
	for _, c := range []struct {
		pipeline string
		want     []string // steps warned about
	}{
		{"[a, b]", []string{"b"}},
		{"[b, a]", nil},
		{"[b, a, c]", nil},
		{"[[a, b], c]", nil},
		{"[[a, c], b]", []string{"b"}},
	} {
		f := parseFactory(t, "version: 1\nrepos: {}\npipelines: {default: "+c.pipeline+"}\n"+steps)
		r := (&Validator{Getenv: func(string) string { return "" }}).Validate(f, nil)
		var got []string
		for _, w := range r.Warnings {
			if w.Code == config.WCodeUnsandboxedAfter {
				got = append(got, w.Path[len("steps."):])
				if w.Fix != "set steps.b.sandbox: required, or move it before a" && w.Fix != "set steps.b.sandbox: required, or move it before c" {
					t.Errorf("fix: %s", w.Fix)
				}
				if w.Line == 0 {
					t.Errorf("W12 without a position: %+v", w)
				}
			}
		}
		if len(got) != len(c.want) || len(got) > 0 && got[0] != c.want[0] {
			t.Errorf("pipeline %s: warned %v, want %v", c.pipeline, got, c.want)
		}
	}
}

// W14: a cache shared by a sandboxed step and a step outside the sandbox
// carries what the sandboxed step left (a toolchain in GOMODCACHE, a
// config.toml in CARGO_HOME) to the host; validate warns on the outside
// step. A cache of its own, or only sandboxed users, is the twin.
func TestValidateCacheSharedWithUnsandboxed(t *testing.T) {
	for _, c := range []struct {
		steps string
		want  []string
	}{
		{"  a: {run: [\"true\"], sandbox: required}\n  b: {run: [\"true\"], sandbox: \"off\"}\ncaches: [go, cargo]\n", []string{"b"}},
		{"  a: {run: [\"true\"], sandbox: required, caches: [cargo]}\n  b: {run: [\"true\"], sandbox: \"off\", caches: [cargo]}\n", []string{"b"}},
		{"  a: {run: [\"true\"], sandbox: required, caches: [cargo]}\n  b: {run: [\"true\"], sandbox: \"off\", caches: {cargo: {path: ./host-cargo}}}\n", nil},
		{"  a: {run: [\"true\"], sandbox: required}\n  b: {run: [\"true\"], sandbox: required}\ncaches: [go]\n", nil},
		{"  a: {run: [\"true\"], sandbox: required, caches: [go]}\n  b: {run: [\"true\"], sandbox: \"off\"}\n", nil},
	} {
		f := parseFactory(t, "version: 1\nrepos: {}\npipelines: {default: [a, b]}\nsteps:\n"+c.steps)
		r := (&Validator{Getenv: func(string) string { return "" }}).Validate(f, nil)
		var got []string
		for _, w := range r.Warnings {
			if w.Code == config.WCodeCacheUnsandboxed {
				got = append(got, w.Path[len("steps."):])
				if w.Line == 0 || !strings.Contains(w.Fix, "steps.b.sandbox: required") {
					t.Errorf("W14 %+v", w)
				}
			}
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: W14 on %v, want %v", c.steps, got, c.want)
		}
	}
}
