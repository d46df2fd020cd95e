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
	return InstallNPM(t, NPMCLI{Package: ClaudePackage, Bin: "claude", Dir: "claude-code", Want: "Claude Code"})
}

// npm packages of the other real CLIs kusaw's tests run.
var (
	CodexCLI  = NPMCLI{Package: "@openai/codex", Bin: "codex", Dir: "codex", Want: "codex-cli"}
	GeminiCLI = NPMCLI{Package: "@google/gemini-cli", Bin: "gemini", Dir: "gemini"}
	// QwenCLI is Qwen Code, run through an agent described in the
	// factory (providers.NAME.agent): OpenAI chat completions.
	QwenCLI = NPMCLI{Package: "@qwen-code/qwen-code", Bin: "qwen", Dir: "qwen-code"}
	// OpencodeCLI is opencode; its npm package brings the platform's
	// binary as a dependency (opencode-linux-x64).
	OpencodeCLI = NPMCLI{Package: "opencode-ai", Bin: "opencode", Dir: "opencode"}
)

// NPMCLI is an agent CLI installed from the npm registry for tests.
type NPMCLI struct {
	Package string // npm package
	Bin     string // its program in node_modules/.bin
	Dir     string // the cache folder's name
	Want    string // what `--version` prints ("" = anything, exit 0)
}

// InstallNPM returns the path of cli's program for the registry's latest
// version, installing it once per machine and version into the user's
// cache folder (kusaw-test/DIR/VERSION; one version is kept). Without npm
// or the registry it skips, except under CI=true, where it fails.
func InstallNPM(t testing.TB, cli NPMCLI) (bin, version string) {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		skipOrFail(t, "the real %s test needs npm: %v", cli.Package, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "view", cli.Package, "version").Output()
	version = strings.TrimSpace(string(out))
	if err != nil || version == "" {
		skipOrFail(t, "npm view %s failed (registry not reachable?): %v", cli.Package, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	root := filepath.Join(cache, "kusaw-test", cli.Dir)
	dir := filepath.Join(root, version)
	bin = filepath.Join(dir, "node_modules", ".bin", cli.Bin)
	if cli.works(bin) {
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
	t.Logf("installing %s@%s into %s", cli.Package, version, dir)
	ictx, icancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer icancel()
	cmd := exec.CommandContext(ictx, npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", cli.Package+"@"+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		skipOrFail(t, "npm install %s@%s failed: %v: %s", cli.Package, version, err, tail(out, 600))
	}
	if !cli.works(filepath.Join(tmp, "node_modules", ".bin", cli.Bin)) {
		skipOrFail(t, "npm installed %s@%s but `%s --version` does not run (postinstall skipped?)", cli.Package, version, cli.Bin)
	}
	os.RemoveAll(dir) // a broken earlier install
	if err := os.Rename(tmp, dir); err != nil && !cli.works(bin) {
		t.Fatalf("caching the install: %v", err)
	}
	// Keep one version: each is tens to hundreds of MB.
	if old, err := os.ReadDir(root); err == nil {
		for _, e := range old {
			if e.Name() != version && !strings.HasPrefix(e.Name(), ".install-") {
				os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
	return bin, version
}

func (cli NPMCLI) works(bin string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/local/bin", "HOME=" + os.TempDir(), "DISABLE_AUTOUPDATER=1"}
	out, err := cmd.Output()
	return err == nil && bytes.Contains(out, []byte(cli.Want))
}
