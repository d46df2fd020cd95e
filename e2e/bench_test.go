package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// End-to-end cost of `kusaw run` on a no-op 3-step pipeline over one repo
// (target ≤ 0.5 s: docs/architecture.md, "Targets"), against the git floor measured in the same
// run: three `git worktree add -b` / `git worktree remove` cycles.
//
//	go test -run '^$' -bench 'KusawRun|GitFloor' -benchtime 10x ./e2e/

func noopDir(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main", "app"}, {"-C", "app", "-c", "user.name=b", "-c", "user.email=b@b.invalid", "commit", "-q", "--allow-empty", "-m", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte(`version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [a, b, c]
steps:
  a: {run: ["true"]}
  b: {run: ["true"]}
  c: {run: ["true"]}
`), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func BenchmarkKusawRunNoop3Steps(b *testing.B) {
	dir := noopDir(b)
	env := append(os.Environ(), "KUSAW_SECRETS_DIR="+filepath.Join(dir, "secrets"))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(kusawBin, "run")
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kusaw run: %v\n%s", err, out)
		}
	}
}

func BenchmarkGitFloorNoop3Steps(b *testing.B) {
	dir := noopDir(b)
	repo, wt := filepath.Join(dir, "app"), filepath.Join(dir, "wt")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for s := 0; s < 3; s++ {
			for _, args := range [][]string{{"worktree", "add", "-q", "-b", fmt.Sprintf("floor/%d/%d", i, s), wt, "HEAD"}, {"worktree", "remove", "--force", wt}} {
				cmd := exec.Command("git", args...)
				cmd.Dir = repo
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("git %v: %v %s", args, err, out)
				}
			}
		}
	}
}
