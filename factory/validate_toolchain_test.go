package factory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

// W15: validate names each toolchain folder the Linux sandbox adds to a
// sandboxed step's view for its PATH; one allow_read lists is not named,
// nor is a step outside the sandbox.
func TestValidateToolchainAdded(t *testing.T) {
	root, err := os.MkdirTemp("/var/tmp", "kusaw-validate-toolchain-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	home := filepath.Join(root, "home")
	node := filepath.Join(home, ".nvm", "versions", "node", "v22")
	if err := os.MkdirAll(filepath.Join(node, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PATH": filepath.Join(node, "bin") + ":/usr/bin:/bin", "HOME": home}
	for _, c := range []struct {
		name, step string
		want       bool
	}{
		{"sandboxed", `{run: ["true"], sandbox: {mode: required}}`, true},
		{"listed in allow_read", `{run: ["true"], sandbox: {mode: required, allow_read: [` + node + `]}}`, false},
		{"outside the sandbox", `{run: ["true"], sandbox: "off"}`, false},
	} {
		f := parseFactory(t, "version: 1\nrepos: {}\npipelines: {default: [a]}\nsteps:\n  a: "+c.step+"\n")
		v := &Validator{GOOS: "linux", Getenv: func(k string) string { return env[k] }}
		r := v.Validate(f, nil)
		var got *config.Finding
		for i := range r.Warnings {
			if r.Warnings[i].Code == config.WCodeToolchain {
				got = &r.Warnings[i]
			}
		}
		if (got != nil) != c.want {
			t.Fatalf("%s: W15 %v, want %v", c.name, got, c.want)
		}
		if got != nil && (!strings.Contains(got.Message, node) || !strings.Contains(got.Fix, "steps.a.sandbox.allow_read")) {
			t.Errorf("%s: W15 does not name the folder and the fix: %s (fix: %s)", c.name, got.Message, got.Fix)
		}
	}
}
