package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repoRoot is the checkout the e2e tests build from.
func repoRoot() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(self))
}

// TestVersionUnstamped: a plain go build says devel, and --version is the
// same as the version command; a wrong flag's hint names the program once.
func TestVersionUnstamped(t *testing.T) {
	dir := t.TempDir()
	r := runKusaw(t, dir, "version", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var bi map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &bi); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if bi["version"] != "devel" || bi["go"] != runtime.Version() || bi["platform"] != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("unstamped build: %s", r.stdout)
	}
	if b, _ := bi["sandbox_backend"].(string); b == "" {
		t.Errorf("no sandbox backend: %s", r.stdout)
	}
	v := runKusaw(t, dir, "--version")
	if v.code != 0 || !strings.HasPrefix(v.stdout, "kusaw devel\n") || !strings.Contains(v.stdout, "platform: "+runtime.GOOS) {
		t.Errorf("--version: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	bad := runKusaw(t, dir, "--bogus")
	if bad.code != 2 || !strings.Contains(bad.stderr, "(see 'kusaw --help')") {
		t.Errorf("unknown root flag: exit %d %q", bad.code, bad.stderr)
	}
	bad = runKusaw(t, dir, "sandbox", "exec", "--bogus")
	if bad.code != 2 || !strings.Contains(bad.stderr, "(see 'kusaw sandbox exec --help')") {
		t.Errorf("unknown sub-command flag: exit %d %q", bad.code, bad.stderr)
	}
}

// TestVersionMakeBuild: make build stamps the commit of the tree it ran
// in, and whether that tree had changes.
func TestVersionMakeBuild(t *testing.T) {
	need(t, "make")
	root := repoRoot()
	bin := filepath.Join(t.TempDir(), "kusaw")
	mk := exec.Command("make", "-s", "build", "BIN="+bin)
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var bi struct {
		Version, Commit string
		Modified        bool
	}
	if err := json.Unmarshal(out, &bi); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	head := strings.TrimSpace(git(t, root, "rev-parse", "HEAD"))
	dirty := strings.TrimSpace(git(t, root, "status", "--porcelain")) != ""
	if bi.Commit != head || bi.Modified != dirty || bi.Version == "devel" || bi.Version == "" {
		t.Errorf("stamps: %s; want commit %s modified %v", out, head, dirty)
	}
}

// TestLintUntidyGoMod: make lint's tidy check (scripts/check-tidy.sh)
// fails on a go.mod that requires a module nothing imports, naming the
// change, and passes on the same module once tidy. Offline: the module
// is a local replace.
func TestLintUntidyGoMod(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "dep", "go.mod"), "module example.invalid/dep\n\ngo 1.22\n")
	writeFile(t, filepath.Join(dir, "dep", "dep.go"), "package dep\n")
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n\nfunc main() {}\n")
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.invalid/m\n\ngo 1.22\n\nrequire example.invalid/dep v0.0.0\n\nreplace example.invalid/dep => ./dep\n")
	check := func() (string, error) {
		cmd := exec.Command(filepath.Join(repoRoot(), "scripts", "check-tidy.sh"))
		cmd.Dir = dir
		cmd.Env = append(testEnv(t, dir), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := check()
	if err == nil || !strings.Contains(out, "not tidy") || !strings.Contains(out, "-require example.invalid/dep") {
		t.Fatalf("untidy go.mod passed the check (err %v):\n%s", err, out)
	}
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.invalid/m\n\ngo 1.22\n")
	if out, err := check(); err != nil {
		t.Fatalf("a tidy go.mod failed the check: %v\n%s", err, out)
	}
}
