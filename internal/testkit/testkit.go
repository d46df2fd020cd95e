// Package testkit holds helpers that tests of several packages share: git
// repositories and factory files in temporary folders.
package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

// NeedGit fails the test under CI=true, and skips it elsewhere, when git is
// not installed.
func NeedGit(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git is not installed")
		}
		t.Skip("git is not installed")
	}
}

// GitRun runs git in dir and returns its trimmed output; a failure fails t.
func GitRun(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Factory writes repos and a factory file into a temp folder and loads it.
func Factory(t testing.TB, yaml string, repos ...string) *config.Factory {
	t.Helper()
	NeedGit(t)
	dir := t.TempDir()
	t.Setenv("KUSAW_SECRETS_DIR", filepath.Join(dir, "secrets"))
	for _, r := range repos {
		p := filepath.Join(dir, r)
		os.MkdirAll(p, 0o755)
		GitRun(t, p, "init", "-q", "-b", "main")
		GitRun(t, p, "config", "user.email", "t@example.invalid")
		GitRun(t, p, "config", "user.name", "t")
		os.WriteFile(filepath.Join(p, "README"), []byte(r), 0o644)
		GitRun(t, p, "add", ".")
		GitRun(t, p, "commit", "-qm", "init")
	}
	path := filepath.Join(dir, "factory.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	f, fs, err := config.Load(path)
	if err != nil || len(fs.Errors()) > 0 {
		t.Fatalf("load: %v %v", err, fs.Errors())
	}
	return f
}
