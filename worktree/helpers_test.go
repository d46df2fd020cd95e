package worktree

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func needGit(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git is not on PATH: %v", err)
		}
		t.Skipf("git is not on PATH: %v", err)
	}
}

// tgit runs git in dir as a person (or a step) would, outside the package.
func tgit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := tgitErr(dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

func tgitErr(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	env := []string{"LC_ALL=C", "GIT_TERMINAL_PROMPT=0"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// isolateHome keeps the user's global git config out of the test.
func isolateHome(t testing.TB) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
}

// newRepo makes a repository with an identity, a .gitignore and one commit
// on branch main.
func newRepo(t testing.TB) string {
	t.Helper()
	needGit(t)
	dir := filepath.Join(t.TempDir(), "app")
	tgit(t, "", "init", "-q", "-b", "main", dir)
	tgit(t, dir, "config", "user.name", "Repo Owner")
	tgit(t, dir, "config", "user.email", "owner@example.test")
	write(t, filepath.Join(dir, "README"), "hello\n")
	write(t, filepath.Join(dir, "gone.txt"), "to be deleted\n")
	write(t, filepath.Join(dir, ".gitignore"), "*.log\n")
	tgit(t, dir, "add", "-A")
	tgit(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

func open(t testing.TB, dir string) *Repo {
	t.Helper()
	r, err := OpenRepo(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// assertClean checks that only the main checkout is registered and that it
// has no changes at all.
func assertClean(t *testing.T, dir string) {
	t.Helper()
	list := tgit(t, dir, "worktree", "list", "--porcelain")
	if n := strings.Count(list, "worktree "); n != 1 {
		t.Errorf("git worktree list shows %d worktrees, want only the main one:\n%s", n, list)
	}
	if st := tgit(t, dir, "status", "--porcelain", "--untracked-files=all"); st != "" {
		t.Errorf("git status is not clean:\n%s", st)
	}
}
