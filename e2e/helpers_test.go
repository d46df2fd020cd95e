package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// result is one kusaw invocation's outcome.
type result struct {
	stdout, stderr string
	code           int
}

// env is the environment of kusaw in a test: a private secret store and
// key folder, a short kill grace.
func testEnv(t *testing.T, home string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUSAW_") || strings.HasPrefix(kv, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	// A home of the test's own: agent login folders (~/.claude) that the
	// sandbox prepares must not land in the real one. Go keeps its caches.
	h := filepath.Join(home, "home")
	_ = os.MkdirAll(h, 0o755)
	env = append(env, "HOME="+h, "XDG_CONFIG_HOME="+filepath.Join(h, ".config"), "XDG_CACHE_HOME="+filepath.Join(h, ".cache"))
	env = append(env, goCacheEnv()...)
	return append(env, "KUSAW_SECRETS_DIR="+filepath.Join(home, "secrets"), "KUSAW_KILL_GRACE=2s")
}

var goCache struct {
	once sync.Once
	env  []string
}

// goCacheEnv pins Go's caches to the real ones, so a step that runs go
// under a test's own HOME does not rebuild the standard library.
func goCacheEnv() []string {
	goCache.once.Do(func() {
		for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
			if out, err := exec.Command("go", "env", v).Output(); err == nil {
				goCache.env = append(goCache.env, v+"="+strings.TrimSpace(string(out)))
			}
		}
	})
	return goCache.env
}

// runKusaw runs the built binary in dir and waits.
// loneKusaw is a copy of the kusaw under test in a folder of its own,
// with no kusaw-bridge or kusaw-daemon beside it (a go install, a
// copied binary).
func loneKusaw(t *testing.T) string {
	t.Helper()
	lone := filepath.Join(t.TempDir(), "kusaw")
	data, err := os.ReadFile(kusawBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return lone
}

func runKusaw(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = testEnv(t, dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kusaw %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// startKusaw starts the binary without waiting.
func startKusaw(t *testing.T, dir string, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = testEnv(t, dir)
	out, errb := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out, errb
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// git runs git in dir and returns its trimmed output.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a git repository with one commit.
func newRepo(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, p, "init", "-q", "-b", "main")
	git(t, p, "config", "user.email", "test@example.invalid")
	git(t, p, "config", "user.name", "test")
	writeFile(t, filepath.Join(p, "README"), name+"\n")
	git(t, p, "add", ".")
	git(t, p, "commit", "-q", "-m", "init")
	return p
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// factoryDir makes a folder with the given repos and factory.yaml.
func factoryDir(t *testing.T, yaml string, repos ...string) string {
	t.Helper()
	need(t, "git")
	dir := t.TempDir()
	for _, r := range repos {
		newRepo(t, dir, r)
	}
	writeFile(t, filepath.Join(dir, "factory.yaml"), yaml)
	return dir
}

// onlyRun returns the id of the factory's single run.
func onlyRun(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("want exactly one run folder, got %v (%v)", entries, err)
	}
	return entries[0].Name()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
