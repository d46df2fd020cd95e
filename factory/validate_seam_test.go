package factory

import (
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
