package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var hookNames = []string{
	"post-checkout", "pre-commit", "prepare-commit-msg", "commit-msg", "post-commit",
	"reference-transaction", "post-index-change", "pre-auto-gc", "post-rewrite",
}

// installHooks puts a hook that records its name into marker for every hook
// kusaw's git could trigger, either in .git/hooks or in a core.hooksPath
// directory (as husky does), plus an fsmonitor command.
func installHooks(t *testing.T, dir, marker string, viaHooksPath bool) {
	t.Helper()
	hooks := filepath.Join(dir, ".git", "hooks")
	if viaHooksPath {
		hooks = filepath.Join(dir, ".husky")
		tgit(t, dir, "config", "core.hooksPath", hooks)
	}
	for _, h := range hookNames {
		script := "#!/bin/sh\necho " + h + " >> '" + marker + "'\n"
		if h == "reference-transaction" {
			script += "cat >/dev/null\n"
		}
		if err := os.MkdirAll(hooks, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hooks, h), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fsmon := filepath.Join(t.TempDir(), "fsmonitor")
	if err := os.WriteFile(fsmon, []byte("#!/bin/sh\necho fsmonitor >> '"+marker+"'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tgit(t, dir, "config", "core.fsmonitor", fsmon)
}

func TestHooksDoNotRunForKusawGit(t *testing.T) {
	for _, viaHooksPath := range []bool{false, true} {
		name := ".git/hooks"
		if viaHooksPath {
			name = "core.hooksPath"
		}
		t.Run(name, func(t *testing.T) {
			dir := newRepo(t)
			marker := filepath.Join(t.TempDir(), "ran")
			installHooks(t, dir, marker, viaHooksPath)
			if viaHooksPath {
				// .husky is committed, as in a real project.
				tgit(t, dir, "add", "-A")
				tgit(t, dir, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "husky")
				// The setup's own git ran the fsmonitor; start counting now.
				if err := os.Remove(marker); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}

			// Everything kusaw does to a repository.
			r := open(t, dir)
			if _, err := r.Dirty(); err != nil {
				t.Fatal(err)
			}
			run, _, err := r.CreateRunBranch("r", "")
			if err != nil {
				t.Fatal(err)
			}
			w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(w.Path, "f"), "x\n")
			sha, _, err := w.CommitAll("m")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.AdvanceBranch(run, sha); err != nil {
				t.Fatal(err)
			}
			if _, _, err := r.Diff(run+"~1", run); err != nil {
				t.Fatal(err)
			}
			if err := r.RemoveWorktree(w); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(marker); err == nil {
				t.Fatalf("hooks ran for kusaw's git:\n%s", b)
			}

			// The twin: the same hooks do run for the user's own git, so the
			// absence above is kusaw's doing.
			write(t, filepath.Join(dir, "g"), "y\n")
			tgit(t, dir, "add", "g")
			tgit(t, dir, "commit", "-q", "-m", "user's commit")
			b, err := os.ReadFile(marker)
			if err != nil {
				t.Fatalf("the user's commit did not run the hooks either: %v", err)
			}
			for _, h := range []string{"pre-commit", "commit-msg", "post-commit", "fsmonitor"} {
				if !strings.Contains(string(b), h) {
					t.Errorf("hook %s did not run for the user's commit; ran:\n%s", h, b)
				}
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	isolateHome(t)
	t.Run("repo without identity", func(t *testing.T) {
		needGit(t)
		dir := filepath.Join(t.TempDir(), "noid")
		tgit(t, "", "init", "-q", "-b", "main", dir)
		write(t, filepath.Join(dir, "a"), "a\n")
		tgit(t, dir, "add", "a")
		tgit(t, dir, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "-m", "first")
		r := open(t, dir)
		run, _, _ := r.CreateRunBranch("r", "")
		w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(w.Path, "b"), "b\n")
		sha, _, err := w.CommitAll("m")
		if err != nil {
			t.Fatal(err)
		}
		got := tgit(t, dir, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha)
		if got != "kusaw <kusaw@localhost>|kusaw <kusaw@localhost>" {
			t.Fatalf("identity %q, want kusaw <kusaw@localhost>", got)
		}
		_ = r.RemoveWorktree(w)
	})
	t.Run("repo with identity", func(t *testing.T) {
		dir := newRepo(t)
		r := open(t, dir)
		run, _, _ := r.CreateRunBranch("r", "")
		w, _ := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
		write(t, filepath.Join(w.Path, "b"), "b\n")
		sha, _, err := w.CommitAll("m")
		if err != nil {
			t.Fatal(err)
		}
		if got := tgit(t, dir, "log", "-1", "--format=%an <%ae>", sha); got != "Repo Owner <owner@example.test>" {
			t.Fatalf("identity %q, want the repository's own", got)
		}
		_ = r.RemoveWorktree(w)
	})
}

// kusaw's git must not act on a repository named by GIT_DIR or
// GIT_INDEX_FILE in kusaw's own environment (set by a hook that runs kusaw,
// or a shell).
func TestInheritedGitEnvironmentIgnored(t *testing.T) {
	dir := newRepo(t)
	other := newRepo(t)
	otherHead := tgit(t, other, "rev-parse", "HEAD")
	t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
	t.Setenv("GIT_WORK_TREE", other)
	t.Setenv("GIT_INDEX_FILE", filepath.Join(other, ".git", "index"))
	r := open(t, dir)
	if r.Path != dir {
		t.Fatalf("opened %s, want %s", r.Path, dir)
	}
	run, _, err := r.CreateRunBranch("r", "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "f"), "x\n")
	if _, _, err := w.CommitAll("m"); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"} {
		os.Unsetenv(k)
	}
	if got := tgit(t, other, "rev-parse", "HEAD"); got != otherHead {
		t.Fatal("the other repository was changed")
	}
	if _, err := tgitErr(other, "rev-parse", "--verify", "refs/heads/kusaw/r"); err == nil {
		t.Fatal("the run branch was created in the repository named by GIT_DIR")
	}
	tgit(t, dir, "rev-parse", "--verify", "refs/heads/kusaw/r")
}
