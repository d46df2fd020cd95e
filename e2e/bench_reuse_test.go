package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkKusawRunReuse20k: a whole `kusaw run` of a no-op step on a
// repository of 20,000 files (KUSAW_BENCH_FILES to change), after a first
// run that left its tree in the pool, against `git worktree add` of the
// same repository (and its removal, as an attempt's end has), alternated
// in the same loop so both see the same load. Issue 30: an attempt after
// the first costs what differs, not the repository's size.
//
//	go test -run '^$' -bench KusawRunReuse20k -benchtime 3x ./e2e/
func BenchmarkKusawRunReuse20k(b *testing.B) {
	n := 20000
	if s := os.Getenv("KUSAW_BENCH_FILES"); s != "" {
		fmt.Sscan(s, &n)
	}
	src := benchFilesRepo(b, n)
	dir := b.TempDir()
	repo := filepath.Join(dir, "app")
	// A local clone without a checkout: the objects are hard links, and
	// kusaw never uses the main checkout's files.
	gitB(b, dir, "clone", "-q", "--local", "--no-checkout", src, repo)
	gitB(b, repo, "config", "user.name", "b")
	gitB(b, repo, "config", "user.email", "b@b.invalid")
	if err := os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte(`version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [noop]
steps:
  noop: {run: ["true"]}
`), 0o644); err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "KUSAW_SECRETS_DIR="+filepath.Join(dir, "secrets"))
	kusawRun := func() time.Duration {
		start := time.Now()
		cmd := exec.Command(kusawBin, "run")
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kusaw run: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	first := kusawRun() // checks out afresh and fills the pool
	if m, _ := filepath.Glob(filepath.Join(dir, ".kusaw", "pool", "*", "idle-*")); len(m) != 1 {
		b.Fatalf("the first run left %d trees in the pool", len(m))
	}
	var tRun, tGit time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tRun += kusawRun()
		wt := filepath.Join(dir, "plain")
		start := time.Now()
		gitB(b, repo, "worktree", "add", "-q", "-b", fmt.Sprintf("plain/%d", i), wt, "HEAD")
		gitB(b, repo, "worktree", "remove", "--force", wt)
		tGit += time.Since(start)
	}
	b.StopTimer()
	nn := float64(b.N)
	b.ReportMetric(float64(first.Milliseconds()), "first-run-ms")
	b.ReportMetric(float64(tRun.Milliseconds())/nn, "run-ms")
	b.ReportMetric(float64(tGit.Milliseconds())/nn, "git-add-ms")
	b.ReportMetric(float64(tRun)/float64(tGit), "run/git-add")
	b.ReportMetric(0, "ns/op")
}

func gitB(b *testing.B, dir string, args ...string) {
	b.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// benchFilesRepo is a repository of n small files in folders of 100, made
// once under the user's cache folder (the same one worktree's
// BenchmarkWorktreeReuse makes).
func benchFilesRepo(b *testing.B, n int) string {
	b.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "kusaw-bench", fmt.Sprintf("repo-%d", n))
	if _, err := os.Stat(filepath.Join(dir, ".git", "kusaw-bench-done")); err == nil {
		return dir
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	gitB(b, dir, "init", "-q", "-b", "main")
	for i := range n {
		p := filepath.Join(dir, "src", fmt.Sprintf("d%04d", i/100), fmt.Sprintf("f%03d.go", i%100))
		if i%100 == 0 {
			os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("package p\n\nconst X%d = %d\n", i, i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	gitB(b, dir, "add", "-A")
	gitB(b, dir, "-c", "user.name=Bench", "-c", "user.email=bench@example.test", "commit", "-q", "-m", "files")
	if err := os.WriteFile(filepath.Join(dir, ".git", "kusaw-bench-done"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}
