package providertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ClaudePackage is the npm package of the real Claude Code CLI.
const ClaudePackage = "@anthropic-ai/claude-code"

// skipOrFail skips with the reason, except under CI=true, where it fails
// (CI reaches the npm registry, so not running there is a defect).
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// InstallClaude returns the path of the real CLI for the registry's
// latest version, installing it into the cache when missing.
func InstallClaude(t testing.TB) (bin, version string) {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		skipOrFail(t, "real Claude Code test needs npm: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "view", ClaudePackage, "version").Output()
	version = strings.TrimSpace(string(out))
	if err != nil || version == "" {
		skipOrFail(t, "npm view %s failed (registry not reachable?): %v", ClaudePackage, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	root := filepath.Join(cache, "kusaw-test", "claude-code")
	dir := filepath.Join(root, version)
	bin = filepath.Join(dir, "node_modules", ".bin", "claude")
	if works(bin) {
		return bin, version
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(root, ".install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	t.Logf("installing %s@%s into %s", ClaudePackage, version, dir)
	ictx, icancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer icancel()
	cmd := exec.CommandContext(ictx, npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", ClaudePackage+"@"+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		skipOrFail(t, "npm install %s@%s failed: %v: %s", ClaudePackage, version, err, tail(out, 600))
	}
	if !works(filepath.Join(tmp, "node_modules", ".bin", "claude")) {
		skipOrFail(t, "npm installed %s@%s but `claude --version` does not run (postinstall skipped?)", ClaudePackage, version)
	}
	os.RemoveAll(dir) // a broken earlier install
	if err := os.Rename(tmp, dir); err != nil && !works(bin) {
		t.Fatalf("caching the install: %v", err)
	}
	// Keep one version: each is a few hundred MB.
	if old, err := os.ReadDir(root); err == nil {
		for _, e := range old {
			if e.Name() != version && !strings.HasPrefix(e.Name(), ".install-") {
				os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
	return bin, version
}

func works(bin string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir(), "DISABLE_AUTOUPDATER=1"}
	out, err := cmd.Output()
	return err == nil && bytes.Contains(out, []byte("Claude Code"))
}
