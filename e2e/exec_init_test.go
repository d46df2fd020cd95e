package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kusaw sandbox exec -- CMD without a factory file runs from
// cmd/kusaw/early's init, before the packages of kusaw's other commands
// initialise (docs/benchmarks.md, "Lean start, eleventh pass (issue 25)"):
// the runtime's trace of package initialisers ends at the sandbox, with
// none of net/http, the YAML decoder, cobra, the configuration or the
// factory. It fails when one of them comes onto that path (an import of
// net or regexp in the sandbox is enough). Twins: with a factory file, or
// a setting, main runs the command as before, and both work.
func TestSandboxExecInitialisesOnlyTheSandbox(t *testing.T) {
	need(t, "bwrap")
	home := t.TempDir()
	dir := t.TempDir()
	run := func(extraEnv []string, args ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(kusawBin, args...)
		cmd.Dir = dir
		cmd.Env = append(append(testEnv(t, home), "GODEBUG=inittrace=1"), extraEnv...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), exitCode(err)
	}
	initLine := regexp.MustCompile(`(?m)^init (\S+) @`)
	inits := func(stderr string) map[string]bool {
		m := map[string]bool{}
		for _, s := range initLine.FindAllStringSubmatch(stderr, -1) {
			m[s[1]] = true
		}
		return m
	}
	heavy := []string{"net/http", "go.yaml.in/yaml/v3", "github.com/spf13/cobra", "github.com/adhocore/gronx", "github.com/nats-io/nkeys",
		"github.com/kusaw/kusaw/config", "github.com/kusaw/kusaw/factory", "github.com/kusaw/kusaw/egress", "net", "regexp"}

	out, errs, code := run(nil, "sandbox", "exec", "--", "sh", "-c", "echo inside; exit 7")
	if code != 7 || !strings.Contains(out, "inside") {
		t.Fatalf("exit %d, stdout %q\n%s", code, out, errs)
	}
	got := inits(errs)
	if !got["github.com/kusaw/kusaw/sandbox"] {
		t.Fatalf("no trace of the sandbox's initialiser: is GODEBUG=inittrace=1 read?\n%s", errs)
	}
	for _, h := range heavy {
		if got[h] {
			t.Errorf("%s initialised before sandbox exec ran", h)
		}
	}

	// A setting: main reads it and runs the command, initialising all.
	out, errs, code = run([]string{"KUSAW_LOG_LEVEL=info"}, "sandbox", "exec", "--", "sh", "-c", "echo inside; exit 7")
	if code != 7 || !strings.Contains(out, "inside") {
		t.Fatalf("with a setting: exit %d, stdout %q\n%s", code, out, errs)
	}
	if !inits(errs)["github.com/spf13/cobra"] {
		t.Errorf("with a setting, the command did not go through main:\n%s", errs)
	}
	// A factory file: the factory's policy, through main.
	if err := os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte("version: 1\nrepos:\n  r: {path: .}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, _ = run(nil, "sandbox", "exec", "--", "true")
	if !inits(errs)["github.com/kusaw/kusaw/config"] {
		t.Errorf("with a factory file, the command did not go through main:\n%s", errs)
	}
}
