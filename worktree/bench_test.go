package worktree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkAddAttempt measures creating an attempt's worktree with this
// package against a plain `git worktree add -b` of the same commit on the
// same repository, alternating the two in one run, and reports the ratio
// (kusaw/git). Removal is not timed. Run: go test -run '^$' -bench AddAttempt ./worktree/
func BenchmarkAddAttempt(b *testing.B) {
	needGit(b)
	dir := newRepo(b)
	for i := range 500 {
		write(b, filepath.Join(dir, "src", fmt.Sprintf("d%02d", i%20), fmt.Sprintf("f%03d.go", i)), fmt.Sprintf("package p\n\nconst X%d = %d\n", i, i))
	}
	tgit(b, dir, "add", "-A")
	tgit(b, dir, "commit", "-q", "-m", "files")
	r := open(b, dir)
	run, head, err := r.CreateRunBranch("bench", "")
	if err != nil {
		b.Fatal(err)
	}
	state := b.TempDir()
	var tKusaw, tGit time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		plain := filepath.Join(state, fmt.Sprintf("plain-%d", i), "app")
		start := time.Now()
		cmd := exec.Command("git", "worktree", "add", "--quiet", "-b", fmt.Sprintf("plain/%d", i), plain, head)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git worktree add: %v\n%s", err, out)
		}
		tGit += time.Since(start)

		start = time.Now()
		w, err := r.AddAttempt(run, AttemptBranch("bench", "s", i+1), filepath.Join(state, fmt.Sprintf("kusaw-%d", i), "app"))
		if err != nil {
			b.Fatal(err)
		}
		tKusaw += time.Since(start)

		b.StopTimer()
		if err := r.RemoveWorktree(w); err != nil {
			b.Fatal(err)
		}
		tgit(b, dir, "worktree", "remove", "--force", plain)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(tKusaw.Microseconds())/n/1000, "kusaw-ms/op")
	b.ReportMetric(float64(tGit.Microseconds())/n/1000, "git-ms/op")
	b.ReportMetric(float64(tKusaw)/float64(tGit), "ratio")
}

// BenchmarkAttemptCycle measures everything the engine does with git for one
// attempt that changes a file: open, add the worktree, commit, advance the
// run branch, remove the worktree. It is the worktree share of a no-op
// pipeline's time, reported in ms per attempt.
func BenchmarkAttemptCycle(b *testing.B) {
	needGit(b)
	dir := newRepo(b)
	r := open(b, dir)
	run, _, err := r.CreateRunBranch("cycle", "")
	if err != nil {
		b.Fatal(err)
	}
	state := b.TempDir()
	runs0 := gitRuns.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := OpenRepo(dir)
		if err != nil {
			b.Fatal(err)
		}
		w, err := r.AddAttempt(run, AttemptBranch("cycle", "s", i+1), filepath.Join(state, fmt.Sprint(i), "app"))
		if err != nil {
			b.Fatal(err)
		}
		write(b, filepath.Join(w.Path, "out.txt"), fmt.Sprint(i))
		sha, _, err := w.CommitAll("m")
		if err != nil {
			b.Fatal(err)
		}
		if err := r.AdvanceBranch(run, sha); err != nil {
			b.Fatal(err)
		}
		if err := r.RemoveWorktree(w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/attempt")
	b.ReportMetric(float64(gitRuns.Load()-runs0)/float64(b.N), "git-procs/attempt")
}

// BenchmarkSeamChecks measures what the seam with the host costs an
// attempt (docs/sandbox.md, "What a step leaves behind"): making the
// private ref store and taking the attempt branch from it, scrubbing the
// worktree's private git folder, checking the branch's own ref and reflog
// and the sibling-ref guard, on a repository with 500 files, 20 branches
// and tags of its own and 200 attempt branches of earlier runs. The same
// run times creating the attempt's worktree as the baseline.
// Run: go test -run '^$' -bench SeamChecks ./worktree/
func BenchmarkSeamChecks(b *testing.B) {
	needGit(b)
	dir := newRepo(b)
	for i := range 500 {
		write(b, filepath.Join(dir, "src", fmt.Sprintf("d%02d", i%20), fmt.Sprintf("f%03d.go", i)), fmt.Sprintf("package p\n\nconst X%d = %d\n", i, i))
	}
	tgit(b, dir, "add", "-A")
	tgit(b, dir, "commit", "-q", "-m", "files")
	head := tgit(b, dir, "rev-parse", "HEAD")
	for i := range 10 {
		tgit(b, dir, "branch", fmt.Sprintf("topic-%d", i))
		tgit(b, dir, "tag", fmt.Sprintf("v0.%d", i))
	}
	for i := range 200 {
		tgit(b, dir, "update-ref", "refs/heads/"+AttemptBranch(fmt.Sprintf("old%03d", i/10), "s", i%10+1), head)
	}
	r := open(b, dir)
	run, _, err := r.CreateRunBranch("bench", "")
	if err != nil {
		b.Fatal(err)
	}
	state := b.TempDir()
	var tAdd, tStore, tChecks time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		w, err := r.AddAttempt(run, AttemptBranch("bench", "s", i+1), filepath.Join(state, fmt.Sprintf("a-%d", i), "app"))
		if err != nil {
			b.Fatal(err)
		}
		tAdd += time.Since(start)

		start = time.Now()
		store := filepath.Join(state, fmt.Sprintf("store-%d", i))
		if _, err := w.NewRefStore(store); err != nil {
			b.Fatal(err)
		}
		if _, err := w.AdoptFromStore(store, ""); err != nil {
			b.Fatal(err)
		}
		tStore += time.Since(start)

		start = time.Now()
		g, _ := w.GuardSiblingRefs()
		if _, err := Scrub(w.GitDir); err != nil {
			b.Fatal(err)
		}
		if _, err := w.CheckOwnRef(); err != nil {
			b.Fatal(err)
		}
		if _, _, err := g.Restore(); err != nil {
			b.Fatal(err)
		}
		tChecks += time.Since(start)

		b.StopTimer()
		if err := r.RemoveWorktree(w); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(tStore.Microseconds())/n/1000, "store-ms/op")
	b.ReportMetric(float64(tChecks.Microseconds())/n/1000, "checks-ms/op")
	b.ReportMetric(float64(tAdd.Microseconds())/n/1000, "add-ms/op")
	b.ReportMetric(float64(tStore+tChecks)/float64(tAdd), "ratio-to-add")
}

// benchRepo is a repository of n small files (folders of 100), made once
// and kept under the user's cache folder: a 100,000-file repository takes
// minutes to make.
func benchRepo(b testing.TB, n int) string {
	b.Helper()
	needGit(b)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "kusaw-bench", fmt.Sprintf("repo-%d", n))
	if _, err := os.Stat(filepath.Join(dir, ".git", "kusaw-bench-done")); err == nil {
		return dir
	}
	os.RemoveAll(dir)
	tgit(b, "", "init", "-q", "-b", "main", dir)
	tgit(b, dir, "config", "user.name", "Bench")
	tgit(b, dir, "config", "user.email", "bench@example.test")
	for i := range n {
		p := filepath.Join(dir, "src", fmt.Sprintf("d%04d", i/100), fmt.Sprintf("f%03d.go", i%100))
		if i%100 == 0 {
			os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("package p\n\nconst X%d = %d\n", i, i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	tgit(b, dir, "add", "-A")
	tgit(b, dir, "commit", "-q", "-m", "files")
	write(b, filepath.Join(dir, ".git", "kusaw-bench-done"), "")
	return dir
}

// BenchmarkWorktreeReuse measures an attempt's worktree on repositories of
// 1,000, 20,000 and 100,000 files (KUSAW_BENCH_SIZES to choose): a fresh
// `git worktree add` of the same commit as the baseline, measured in the
// same run, then kusaw's no-op attempt after the first: taking the tree
// from the pool, cleaning it and checking the base out (start), committing
// nothing (commit), and giving it back (release). Each as ms per attempt
// and as a ratio to git worktree add; then the same no-op attempt with a
// write layer (layer-*: the take without the walk, an empty upper
// applied and committed, the release by the layer's survey).
// Run: go test -run '^$' -bench WorktreeReuse -benchtime 5x ./worktree/
func BenchmarkWorktreeReuse(b *testing.B) {
	sizes := []int{1000, 20000, 100000}
	if s := os.Getenv("KUSAW_BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			var n int
			fmt.Sscan(f, &n)
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			dir := benchRepo(b, n) // before isolateHome: the cache is the user's
			isolateHome(b)
			r := open(b, dir)
			run := fmt.Sprintf("bench-%d", time.Now().UnixNano())
			if _, _, err := r.CreateRunBranch(run, ""); err != nil {
				b.Fatal(err)
			}
			runBranch := RunBranch(run)
			head := tgit(b, dir, "rev-parse", "main")
			state := b.TempDir()
			pool := r.Pool(state)
			// The baseline, once per size (it is what a fresh attempt costs).
			plain := filepath.Join(state, "plain", "app")
			start := time.Now()
			tgit(b, dir, "worktree", "add", "--quiet", "-b", "plain/"+run, plain, head)
			tGit := time.Since(start)
			tgit(b, dir, "worktree", "remove", "--force", plain)
			// The first attempt fills the pool.
			w, err := r.AddAttemptWith(runBranch, AttemptBranch(run, "s", 0), filepath.Join(state, "0", "app"), AddOptions{Pool: pool})
			if err != nil {
				b.Fatal(err)
			}
			if ok, err := r.Release(w); !ok || err != nil {
				b.Fatalf("release: %v %v", ok, err)
			}
			var tStart, tCommit, tRelease time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				w, err := r.AddAttemptWith(runBranch, AttemptBranch(run, "s", i+1), filepath.Join(state, fmt.Sprint(i+1), "app"), AddOptions{Pool: pool})
				if err != nil {
					b.Fatal(err)
				}
				if !w.Reused {
					b.Fatalf("attempt %d was not reused: %s", i+1, w.ReuseFailed)
				}
				tStart += time.Since(start)
				start = time.Now()
				if _, _, err := w.CommitAll("m"); err != nil {
					b.Fatal(err)
				}
				tCommit += time.Since(start)
				start = time.Now()
				if ok, err := r.Release(w); !ok || err != nil {
					b.Fatalf("release: %v %v", ok, err)
				}
				tRelease += time.Since(start)
			}
			// The write layer's no-op attempt (docs/factory.md, "The write
			// layer") on a pool of its own: the take without the cleaning
			// walk, an empty upper applied (what a step that changed
			// nothing leaves), the commit and the release by the layer's
			// survey. Its first attempt fills the pool, marked.
			lpool := r.Pool(filepath.Join(state, "layered"))
			layerNoop := func(w *Worktree) (commit time.Duration) {
				start := time.Now()
				l, err := w.NewLayer()
				if err != nil {
					b.Fatal(err)
				}
				if err := w.ApplyLayer(l); err != nil {
					b.Fatal(err)
				}
				if _, _, err := w.CommitAll("m"); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			w, err = r.AddAttemptWith(runBranch, AttemptBranch(run, "l", 0), filepath.Join(state, "l0", "app"), AddOptions{Pool: lpool})
			if err != nil {
				b.Fatal(err)
			}
			layerNoop(w)
			if ok, err := r.Release(w); !ok || err != nil {
				b.Fatalf("release: %v %v", ok, err)
			}
			var lStart, lCommit, lRelease time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				w, err := r.AddAttemptWith(runBranch, AttemptBranch(run, "l", i+1), filepath.Join(state, fmt.Sprint("l", i+1), "app"), AddOptions{Pool: lpool})
				if err != nil {
					b.Fatal(err)
				}
				if !w.Trusted {
					b.Fatalf("layered attempt %d was taken with the walk: %s", i+1, w.ReuseFailed)
				}
				lStart += time.Since(start)
				lCommit += layerNoop(w)
				start = time.Now()
				if ok, err := r.Release(w); !ok || err != nil {
					b.Fatalf("release: %v %v", ok, err)
				}
				lRelease += time.Since(start)
			}
			b.StopTimer()
			nn := float64(b.N)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / nn / 1000 }
			b.ReportMetric(float64(tGit.Microseconds())/1000, "git-add-ms")
			b.ReportMetric(ms(tStart), "start-ms")
			b.ReportMetric(ms(tCommit), "commit-ms")
			b.ReportMetric(ms(tRelease), "release-ms")
			b.ReportMetric(float64(tStart)/nn/float64(tGit), "start/git-add")
			b.ReportMetric(float64(tStart+tCommit+tRelease)/nn/float64(tGit), "attempt/git-add")
			b.ReportMetric(ms(lStart), "layer-start-ms")
			b.ReportMetric(ms(lCommit), "layer-commit-ms")
			b.ReportMetric(ms(lRelease), "layer-release-ms")
			b.ReportMetric(float64(lStart+lCommit+lRelease)/nn/float64(tGit), "layer-attempt/git-add")
			b.ReportMetric(0, "ns/op")
		})
	}
}
