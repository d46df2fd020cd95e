package factory

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// gcRuns is how many runs a retention pass removes in the benchmarks: the
// issue's 500 runs with 1,003 branches.
const gcRuns = 500

// gcFixture makes a state folder with n finished runs, each with a
// record, an events file and its two branches (run and attempt) in repo.
func gcFixture(b *testing.B, repo string, n int) (*State, []string) {
	b.Helper()
	st, err := OpenState(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	head := testkit.GitRun(b, repo, "rev-parse", "HEAD")
	old := time.Now().Add(-60 * 24 * time.Hour)
	var refs strings.Builder
	var ids []string
	for i := range n {
		id := fmt.Sprintf("20261001-%06d-%04x", i, i)
		r := gcRun(id, "default", status.RunSucceeded, old)
		r.Repos = []record.RunRepo{{Name: "app", Path: repo, Branch: "kusaw/" + id}}
		dir := st.RunDir(id)
		os.MkdirAll(filepath.Join(dir, "steps", "build", "1"), 0o700)
		if err := writeJSON(filepath.Join(dir, record.RunFile), r); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, record.EventsFile), []byte(strings.Repeat(`{"seq":1,"type":"x"}`+"\n", 50)), 0o600)
		os.WriteFile(filepath.Join(dir, "steps", "build", "1", record.StdoutFile), []byte("output\n"), 0o600)
		fmt.Fprintf(&refs, "create refs/heads/kusaw/%s %s\ncreate refs/heads/kusaw/attempts/%s/build/1 %s\n", id, head, id, head)
		ids = append(ids, id)
	}
	cmd := exec.Command("git", "update-ref", "--stdin")
	cmd.Dir, cmd.Stdin = repo, strings.NewReader(refs.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("creating the branches: %v %s", err, out)
	}
	return st, ids
}

func gcRepo(b *testing.B) string {
	testkit.NeedGit(b)
	repo := filepath.Join(b.TempDir(), "app")
	os.MkdirAll(repo, 0o755)
	testkit.GitRun(b, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "README"), []byte("x"), 0o644)
	testkit.GitRun(b, repo, "add", ".")
	testkit.GitRun(b, repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "init")
	return repo
}

// BenchmarkGC500Runs: a retention pass over 500 old runs: each under its
// lock, its record read again, its worktrees looked for, its branches
// listed and deleted, its folder renamed and removed.
//
//	go test -run '^$' -bench 'GC500' -benchtime 3x ./factory/
func BenchmarkGC500Runs(b *testing.B) {
	repo := gcRepo(b)
	for b.Loop() {
		b.StopTimer()
		st, _ := gcFixture(b, repo, gcRuns)
		b.StartTimer()
		res, err := st.GC(Retention{MaxAge: 30 * 24 * time.Hour}, time.Now(), false)
		if err != nil || len(res.Removed) != gcRuns {
			b.Fatalf("removed %d of %d: %v", len(res.Removed), gcRuns, err)
		}
	}
}

// BenchmarkGCBaseline500Runs is the least the same removal takes by hand:
// the runs folder removed at once and every branch deleted in one git
// transaction, with no lock, no check and no record read.
func BenchmarkGCBaseline500Runs(b *testing.B) {
	repo := gcRepo(b)
	for b.Loop() {
		b.StopTimer()
		st, ids := gcFixture(b, repo, gcRuns)
		b.StartTimer()
		var del strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&del, "delete refs/heads/kusaw/%s\ndelete refs/heads/kusaw/attempts/%s/build/1\n", id, id)
		}
		cmd := exec.Command("git", "update-ref", "--stdin")
		cmd.Dir, cmd.Stdin = repo, strings.NewReader(del.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		if err := os.RemoveAll(filepath.Join(st.Dir, record.RunsDir)); err != nil {
			b.Fatal(err)
		}
	}
}
