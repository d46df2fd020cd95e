package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// age moves a file's times back past the racy window, as if it had been
// written long ago.
func age(t *testing.T, paths ...string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for _, p := range paths {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// opens opens dir and returns how many git processes it took.
func opens(t *testing.T, dir string) (*Repo, int64) {
	t.Helper()
	n := gitRuns.Load()
	r, err := OpenRepo(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r, gitRuns.Load() - n
}

// A repository opened again without a config change takes no git
// process; any change to a config file git read, or a config file that
// appears, is seen at the next open.
func TestOpenRepoCache(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	cfg := filepath.Join(dir, ".git", "config")
	extra := filepath.Join(dir, "extra.cfg")
	write(t, extra, "[core]\n\tautocrlf = false\n")
	tgit(t, dir, "config", "include.path", extra)
	age(t, cfg, extra)
	first, n := opens(t, dir)
	if n == 0 {
		t.Fatal("the first open ran no git")
	}
	again, n := opens(t, dir)
	if n != 0 {
		t.Errorf("a second open without a change ran %d git processes", n)
	}
	if again.CommonDir != first.CommonDir || again.Path != first.Path || again.Bare != first.Bare || !again.plainAdd {
		t.Errorf("cached open differs: %+v against %+v", again, first)
	}

	// A filter driver added in an included file: seen, guarded.
	write(t, extra, "[filter \"evil\"]\n\tclean = touch /tmp/kusaw-never\n")
	r, n := opens(t, dir)
	if n == 0 || len(r.git.guard) == 0 {
		t.Fatalf("a filter added in an included file: %d processes, guard %v", n, r.git.guard)
	}
	// With filters configured nothing is kept (the guard reads HEAD).
	age(t, extra)
	if _, n := opens(t, dir); n == 0 {
		t.Error("a repository with filter drivers was served from the cache")
	}

	// Back without filters; then the user's global config appears with a
	// sparse checkout: seen.
	write(t, extra, "[core]\n\tautocrlf = false\n")
	age(t, extra)
	opens(t, dir)
	if _, n := opens(t, dir); n != 0 {
		t.Fatalf("not cached again: %d processes", n)
	}
	global := filepath.Join(os.Getenv("HOME"), ".gitconfig")
	write(t, global, "[core]\n\tsparseCheckout = true\n")
	age(t, global)
	r, n = opens(t, dir)
	if n == 0 || r.plainAdd {
		t.Errorf("a new global config: %d processes, plainAdd %v", n, r.plainAdd)
	}

	// A config just written is not trusted to be stable yet.
	tgit(t, dir, "config", "core.sparseCheckout", "false")
	opens(t, dir)
	if _, n := opens(t, dir); n == 0 {
		t.Error("a config written just now was served from the cache")
	}
}

// HasCommit answers for full commit hashes only, with go-git and with the
// git binary alike.
func TestHasCommit(t *testing.T) {
	isolateHome(t)
	for _, binary := range []bool{false, true} {
		dir := newRepo(t)
		if binary {
			// go-git does not open repositories with this extension.
			tgit(t, dir, "config", "extensions.worktreeConfig", "true")
		}
		r, _ := opens(t, dir)
		want := plainReader
		if binary {
			want = "git"
		}
		if name, _ := r.ReadBackend(); name != want {
			t.Fatalf("binary=%v: read backend %s, want %s", binary, name, want)
		}
		head := tgit(t, dir, "rev-parse", "HEAD")
		blob := tgit(t, dir, "rev-parse", "HEAD:README")
		tgit(t, dir, "tag", "-a", "-m", "t", "v1")
		tag := tgit(t, dir, "rev-parse", "v1")
		if !r.HasCommit(head) {
			t.Errorf("binary=%v: HEAD %s not held", binary, head)
		}
		for _, no := range []string{strings.Repeat("1", 40), head[:12], "HEAD", blob, tag, "main", ""} {
			if r.HasCommit(no) {
				t.Errorf("binary=%v: HasCommit(%q) is true", binary, no)
			}
		}
	}
}
