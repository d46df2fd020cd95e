package factory

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/status"
)

// The benchmarks compare a no-op 3-step pipeline through the engine with
// the least git work the same pipeline needs by hand (three worktrees added
// and removed), measured in the same run: report the ratio of the two.
//
//	go test -run '^$' -bench 'Pipeline' -benchtime 20x ./factory/

const noopFactory = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [a, b, c]
steps:
  a: {run: ["true"]}
  b: {run: ["true"]}
  c: {run: ["true"]}
`

// BenchmarkPipelineNoop3Steps: kusaw's whole life of three attempts
// (run branch, worktrees, processes, commits, records, chained events,
// cleanup). Target ≤ 0.5 s end to end (docs/architecture.md, "Targets").
func BenchmarkPipelineNoop3Steps(b *testing.B) {
	f := testkit.Factory(b, noopFactory, "app")
	e, err := New(f, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := e.Run(context.Background(), "")
		if err != nil || r.Record.State != status.RunSucceeded {
			b.Fatalf("run: %v %+v", err, r.Record)
		}
	}
}

// BenchmarkPipelineGitBaseline: three `git worktree add -b` + `true` +
// `git worktree remove`, the floor under any worktree-per-attempt engine.
func BenchmarkPipelineGitBaseline(b *testing.B) {
	f := testkit.Factory(b, noopFactory, "app")
	repo := filepath.Join(f.Dir, "app")
	wt := filepath.Join(f.Dir, "wt")
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for s := 0; s < 3; s++ {
			git("worktree", "add", "-q", "-b", fmt.Sprintf("bench/%d/%d", i, s), wt, "HEAD")
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
			git("worktree", "remove", "--force", wt)
		}
	}
	b.StopTimer()
	os.RemoveAll(wt)
}

// BenchmarkPipelineGroup3 and BenchmarkPipelineSequential3 run the same
// three steps (each writes a file and sleeps 0.3 s) as a parallel group and
// one after another, in the same run: the ratio is what a group saves after
// paying for its merges (three merge commits and one branch move).
//
//	go test -run '^$' -bench 'Pipeline(Group|Sequential)3' -benchtime 5x ./factory/
func BenchmarkPipelineGroup3(b *testing.B) { benchShape(b, "[[a, b, c]]") }

func BenchmarkPipelineSequential3(b *testing.B) { benchShape(b, "[a, b, c]") }

func benchShape(b *testing.B, pipeline string) {
	f := testkit.Factory(b, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: `+pipeline+`
steps:
  a: {run: [sh, -c, "echo a > a.txt; sleep 0.3"]}
  b: {run: [sh, -c, "echo b > b.txt; sleep 0.3"]}
  c: {run: [sh, -c, "echo c > c.txt; sleep 0.3"]}
`, "app")
	e, err := New(f, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := e.Run(context.Background(), "")
		if err != nil || r.Record.State != status.RunSucceeded {
			b.Fatalf("run: %v %+v", err, r.Record)
		}
	}
}
