package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// repoKinds runs a test on a plain repository (read through go-git) and on
// one with extensions.worktreeConfig, which go-git refuses to open, so the
// git binary reads it.
var repoKinds = []struct {
	name    string
	prepare func(t testing.TB, dir string)
	reader  string
}{
	{"plain", func(testing.TB, string) {}, plainReader},
	{"git-binary", func(t testing.TB, dir string) {
		tgit(t, dir, "config", "extensions.worktreeConfig", "true")
	}, "git"},
}

func TestLifecycle(t *testing.T) {
	for _, kind := range repoKinds {
		t.Run(kind.name, func(t *testing.T) {
			dir := newRepo(t)
			kind.prepare(t, dir)
			r := open(t, dir)
			if name, note := r.ReadBackend(); name != kind.reader {
				t.Fatalf("reader = %s (%s), want %s", name, note, kind.reader)
			}
			mainHead := tgit(t, dir, "rev-parse", "HEAD")
			state := t.TempDir()

			branch, base, err := r.CreateRunBranch("r1", "main")
			if err != nil {
				t.Fatal(err)
			}
			if branch != "kusaw/r1" || base != mainHead {
				t.Fatalf("run branch %s at %s, want kusaw/r1 at %s", branch, base, mainHead)
			}

			// Attempt 1 of step plan: add, change, delete, ignore.
			w1, err := r.AddAttempt(branch, AttemptBranch("r1", "plan", 1), filepath.Join(state, "plan/1/worktrees/app"))
			if err != nil {
				t.Fatal(err)
			}
			if w1.BaseSHA != base || w1.Branch != "kusaw/attempts/r1/plan/1" {
				t.Fatalf("worktree %+v", w1)
			}
			if !strings.HasPrefix(w1.GitDir, filepath.Join(r.CommonDir, "worktrees")+string(filepath.Separator)) {
				t.Fatalf("GitDir %s is not under %s/worktrees", w1.GitDir, r.CommonDir)
			}
			if got := tgit(t, w1.Path, "rev-parse", "--abbrev-ref", "HEAD"); got != w1.Branch {
				t.Fatalf("worktree is on %s, want %s", got, w1.Branch)
			}
			write(t, filepath.Join(w1.Path, "PLAN.md"), "the plan\n")
			write(t, filepath.Join(w1.Path, "README"), "hello, changed\n")
			write(t, filepath.Join(w1.Path, "sub/dir/new.txt"), "nested\n")
			write(t, filepath.Join(w1.Path, "debug.log"), "ignored\n")
			if err := os.Remove(filepath.Join(w1.Path, "gone.txt")); err != nil {
				t.Fatal(err)
			}
			sha1, changed, err := w1.CommitAll("plan: attempt 1")
			if err != nil {
				t.Fatal(err)
			}
			if !changed || sha1 == base {
				t.Fatalf("CommitAll = %s, changed=%v; want a new commit", sha1, changed)
			}
			files := tgit(t, dir, "ls-tree", "-r", "--name-only", sha1)
			for _, want := range []string{"PLAN.md", "README", "sub/dir/new.txt", ".gitignore"} {
				if !strings.Contains(files, want) {
					t.Errorf("commit lacks %s:\n%s", want, files)
				}
			}
			for _, bad := range []string{"debug.log", "gone.txt"} {
				if strings.Contains(files, bad) {
					t.Errorf("commit contains %s:\n%s", bad, files)
				}
			}
			if got := tgit(t, dir, "rev-parse", w1.Branch); got != sha1 {
				t.Fatalf("attempt branch at %s, want %s", got, sha1)
			}
			if got := tgit(t, dir, "log", "-1", "--format=%s", sha1); got != "plan: attempt 1" {
				t.Errorf("message %q", got)
			}
			if got := tgit(t, w1.Path, "status", "--porcelain"); got != "" {
				t.Errorf("worktree not clean after CommitAll:\n%s", got)
			}
			if err := r.AdvanceBranch(branch, sha1); err != nil {
				t.Fatal(err)
			}
			if h, _ := r.Head(branch); h != sha1 {
				t.Fatalf("run branch at %s after advance, want %s", h, sha1)
			}

			patch, stat, err := r.Diff(base, sha1)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"+the plan", "-hello", "+hello, changed", "-to be deleted", "sub/dir/new.txt"} {
				if !strings.Contains(patch, want) {
					t.Errorf("patch lacks %q:\n%s", want, patch)
				}
			}
			if !strings.Contains(stat, "PLAN.md") || !strings.Contains(stat, "4 files changed") {
				t.Errorf("stat:\n%s", stat)
			}

			// The next step's attempt starts from the advanced run branch.
			w2, err := r.AddAttempt(branch, AttemptBranch("r1", "implement", 1), filepath.Join(state, "implement/1/worktrees/app"))
			if err != nil {
				t.Fatal(err)
			}
			if w2.BaseSHA != sha1 {
				t.Fatalf("second attempt based on %s, want %s", w2.BaseSHA, sha1)
			}
			if b, err := os.ReadFile(filepath.Join(w2.Path, "PLAN.md")); err != nil || string(b) != "the plan\n" {
				t.Fatalf("second attempt does not see PLAN.md: %q %v", b, err)
			}
			// Nothing changed: no commit, branch unmoved.
			sha2, changed, err := w2.CommitAll("implement")
			if err != nil || changed || sha2 != sha1 {
				t.Fatalf("CommitAll without changes = %s, %v, %v; want %s, false", sha2, changed, err, sha1)
			}

			for _, w := range []*Worktree{w1, w2} {
				if err := r.RemoveWorktree(w); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(w.Path); !os.IsNotExist(err) {
					t.Errorf("%s still exists", w.Path)
				}
			}
			assertClean(t, dir)
			// The branches stay; the main checkout never moved.
			for _, b := range []string{branch, w1.Branch, w2.Branch} {
				tgit(t, dir, "rev-parse", "--verify", "refs/heads/"+b)
			}
			if got := tgit(t, dir, "rev-parse", "HEAD"); got != mainHead {
				t.Errorf("main checkout moved to %s", got)
			}
		})
	}
}

func TestFailedAttemptKeepsBranch(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, base, err := r.CreateRunBranch("r2", "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.AddAttempt(run, AttemptBranch("r2", "test", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "half-done.go"), "package x\n")
	sha, changed, err := w.CommitAll("failed attempt")
	if err != nil || !changed {
		t.Fatal(err, changed)
	}
	// Failed: not advanced, worktree removed.
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
	assertClean(t, dir)
	if got := tgit(t, dir, "rev-parse", w.Branch); got != sha {
		t.Fatalf("failed attempt's branch at %s, want %s", got, sha)
	}
	if h, _ := r.Head(run); h != base {
		t.Fatalf("run branch moved to %s", h)
	}
	// Attempt 2 starts from the run branch, not from the failed attempt.
	w2, err := r.AddAttempt(run, AttemptBranch("r2", "test", 2), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w2.Path, "half-done.go")); !os.IsNotExist(err) {
		t.Fatal("attempt 2 sees the failed attempt's file")
	}
	if err := r.RemoveWorktree(w2); err != nil {
		t.Fatal(err)
	}
}

func TestCommitAfterStepCommittedItself(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, base, _ := r.CreateRunBranch("r3", "")
	w, err := r.AddAttempt(run, AttemptBranch("r3", "s", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	// The step commits part of its work itself, with its own git ...
	write(t, filepath.Join(w.Path, "a.txt"), "a\n")
	tgit(t, w.Path, "add", "a.txt")
	tgit(t, w.Path, "commit", "-q", "-m", "step's own commit")
	stepCommit := tgit(t, w.Path, "rev-parse", "HEAD")
	// ... and leaves the rest uncommitted, some of it staged.
	write(t, filepath.Join(w.Path, "b.txt"), "b\n")
	write(t, filepath.Join(w.Path, "c.txt"), "c\n")
	tgit(t, w.Path, "add", "c.txt")

	sha, changed, err := w.CommitAll("kusaw commit")
	if err != nil || !changed {
		t.Fatal(err, changed)
	}
	if p := tgit(t, dir, "rev-parse", sha+"^"); p != stepCommit {
		t.Fatalf("kusaw's commit has parent %s, want the step's commit %s", p, stepCommit)
	}
	if got := tgit(t, dir, "ls-tree", "--name-only", sha); !strings.Contains(got, "b.txt") || !strings.Contains(got, "c.txt") || !strings.Contains(got, "a.txt") {
		t.Fatalf("tree: %s", got)
	}
	if err := r.AdvanceBranch(run, sha); err != nil {
		t.Fatal(err)
	}

	// A step that committed everything itself: the result is its commit.
	w2, _ := r.AddAttempt(run, AttemptBranch("r3", "s2", 1), filepath.Join(t.TempDir(), "wt"))
	write(t, filepath.Join(w2.Path, "d.txt"), "d\n")
	tgit(t, w2.Path, "add", "d.txt")
	tgit(t, w2.Path, "commit", "-q", "-m", "all mine")
	own := tgit(t, w2.Path, "rev-parse", "HEAD")
	sha2, changed, err := w2.CommitAll("nothing left")
	if err != nil || !changed || sha2 != own {
		t.Fatalf("CommitAll = %s %v %v; want the step's %s, changed", sha2, changed, err, own)
	}
	_ = base
	for _, x := range []*Worktree{w, w2} {
		if err := r.RemoveWorktree(x); err != nil {
			t.Fatal(err)
		}
	}
	assertClean(t, dir)
}

func TestCommitSurvivesWhatAStepLeaves(t *testing.T) {
	cases := []struct {
		name string
		mess func(t *testing.T, w *Worktree)
	}{
		{"detached HEAD", func(t *testing.T, w *Worktree) {
			tgit(t, w.Path, "checkout", "-q", "--detach")
		}},
		{"other branch", func(t *testing.T, w *Worktree) {
			tgit(t, w.Path, "checkout", "-q", "-b", "elsewhere")
		}},
		{"stale index.lock", func(t *testing.T, w *Worktree) {
			write(t, filepath.Join(w.GitDir, "index.lock"), "")
		}},
		{"garbage index", func(t *testing.T, w *Worktree) {
			write(t, filepath.Join(w.GitDir, "index"), "not an index")
		}},
		{"deleted branch", func(t *testing.T, w *Worktree) {
			tgit(t, w.Path, "checkout", "-q", "--detach")
			tgit(t, w.Path, "update-ref", "-d", "refs/heads/"+w.Branch)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := newRepo(t)
			r := open(t, dir)
			run, base, _ := r.CreateRunBranch("r", "")
			w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(w.Path, "work.txt"), "work\n")
			c.mess(t, w)
			sha, changed, err := w.CommitAll("m")
			if err != nil || !changed {
				t.Fatalf("CommitAll: %v changed=%v", err, changed)
			}
			if got := tgit(t, dir, "rev-parse", w.Branch); got != sha {
				t.Fatalf("attempt branch at %s, want %s", got, sha)
			}
			if p := tgit(t, dir, "rev-parse", sha+"^"); p != base {
				t.Fatalf("parent %s, want base %s", p, base)
			}
			if got := tgit(t, dir, "show", sha+":work.txt"); got != "work" {
				t.Fatalf("work.txt = %q", got)
			}
			if err := r.RemoveWorktree(w); err != nil {
				t.Fatal(err)
			}
			assertClean(t, dir)
		})
	}
}

// A step can rewrite its worktree's .git file to point at another
// repository; kusaw's commit must still land in the right one.
func TestCommitIgnoresRedirectedGitFile(t *testing.T) {
	dir := newRepo(t)
	decoy := newRepo(t)
	decoyHead := tgit(t, decoy, "rev-parse", "HEAD")
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("r", "")
	w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "work.txt"), "work\n")
	write(t, filepath.Join(w.Path, ".git"), "gitdir: "+filepath.Join(decoy, ".git")+"\n")
	sha, changed, err := w.CommitAll("m")
	if err != nil || !changed {
		t.Fatal(err, changed)
	}
	if got := tgit(t, dir, "show", sha+":work.txt"); got != "work" {
		t.Fatalf("commit in the real repository lacks work.txt: %q", got)
	}
	if got := tgit(t, decoy, "rev-parse", "HEAD"); got != decoyHead {
		t.Fatal("the decoy repository was written to")
	}
	if _, err := tgitErr(decoy, "cat-file", "-e", sha); err == nil {
		t.Fatal("the commit went to the decoy repository")
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
	assertClean(t, dir)
}

func TestAdvanceRefusesNonFastForward(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, base, _ := r.CreateRunBranch("r", "")
	w, _ := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
	// The step replaces its branch with unrelated history.
	tgit(t, w.Path, "checkout", "-q", "--orphan", "tmp")
	write(t, filepath.Join(w.Path, "evil"), "x\n")
	tgit(t, w.Path, "add", "-A")
	tgit(t, w.Path, "commit", "-q", "-m", "unrelated")
	tgit(t, w.Path, "branch", "-f", w.Branch, "HEAD")
	sha, _, err := w.CommitAll("m")
	if err != nil {
		t.Fatal(err)
	}
	err = r.AdvanceBranch(run, sha)
	if err == nil || !strings.Contains(err.Error(), "not a fast-forward") {
		t.Fatalf("AdvanceBranch = %v, want a not-a-fast-forward error", err)
	}
	if h, _ := r.Head(run); h != base {
		t.Fatal("run branch moved")
	}
	// kusaw never moves a branch that is not its own.
	if err := r.AdvanceBranch("main", sha); err == nil || !strings.Contains(err.Error(), "not a kusaw branch") {
		t.Fatalf("AdvanceBranch(main) = %v", err)
	}
	// Nor a kusaw branch someone checked out.
	tgit(t, dir, "checkout", "-q", run)
	w2, _ := r.AddAttempt(run, AttemptBranch("r", "s", 2), filepath.Join(t.TempDir(), "wt"))
	write(t, filepath.Join(w2.Path, "f"), "f\n")
	sha2, _, _ := w2.CommitAll("m")
	if err := r.AdvanceBranch(run, sha2); err == nil || !strings.Contains(err.Error(), "checked out") {
		t.Fatalf("AdvanceBranch of a checked-out branch = %v", err)
	}
	tgit(t, dir, "checkout", "-q", "main")
	if err := r.AdvanceBranch(run, sha2); err != nil {
		t.Fatalf("the same advance once the branch is not checked out: %v", err)
	}
	for _, x := range []*Worktree{w, w2} {
		if err := r.RemoveWorktree(x); err != nil {
			t.Fatal(err)
		}
	}
	assertClean(t, dir)
}

func TestDirty(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	if d, err := r.Dirty(); err != nil || d {
		t.Fatalf("fresh repo Dirty = %v, %v", d, err)
	}
	write(t, filepath.Join(dir, "untracked.txt"), "x\n")
	if d, err := r.Dirty(); err != nil || d {
		t.Fatalf("untracked file only: Dirty = %v, %v; want false", d, err)
	}
	write(t, filepath.Join(dir, "README"), "edited\n")
	paths, err := r.DirtyPaths()
	if err != nil || len(paths) != 1 || paths[0] != "README" {
		t.Fatalf("DirtyPaths = %v, %v", paths, err)
	}
	tgit(t, dir, "checkout", "README")
	tgit(t, dir, "mv", "gone.txt", "moved.txt")
	if d, _ := r.Dirty(); !d {
		t.Fatal("staged rename not seen as dirty")
	}
	tgit(t, dir, "reset", "-q", "--hard")
	if d, _ := r.Dirty(); d {
		t.Fatal("dirty after reset --hard")
	}
}

func TestResolveBase(t *testing.T) {
	for _, kind := range repoKinds {
		t.Run(kind.name, func(t *testing.T) {
			dir := newRepo(t)
			kind.prepare(t, dir)
			first := tgit(t, dir, "rev-parse", "HEAD")
			write(t, filepath.Join(dir, "second"), "2\n")
			tgit(t, dir, "add", "-A")
			tgit(t, dir, "commit", "-q", "-m", "second")
			second := tgit(t, dir, "rev-parse", "HEAD")
			tgit(t, dir, "tag", "light", first)
			tgit(t, dir, "tag", "-a", "-m", "annotated", "v1", first)
			tgit(t, dir, "branch", "old", first)
			r := open(t, dir)
			for base, want := range map[string]string{
				"": second, "HEAD": second, "main": second, "old": first, "light": first,
				"v1": first, first: first, first[:10]: first, "main~1": first, "refs/heads/old": first,
			} {
				got, err := r.ResolveBase(base)
				if err != nil || got != want {
					t.Errorf("ResolveBase(%q) = %s, %v; want %s", base, got, err, want)
				}
			}
			tree := tgit(t, dir, "rev-parse", "HEAD^{tree}")
			tgit(t, dir, "tag", "treetag", tree)
			for _, bad := range []string{"nope", "--output=/tmp/x", "main~99", "treetag", strings.Repeat("a", 40)} {
				_, err := r.ResolveBase(bad)
				if err == nil {
					t.Errorf("ResolveBase(%q) succeeded", bad)
					continue
				}
				msg := err.Error()
				if !strings.Contains(msg, "not a branch, tag or commit") || !strings.Contains(msg, "fix:") || strings.Contains(msg, "\n") {
					t.Errorf("ResolveBase(%q) error is not one clear line: %q", bad, msg)
				}
			}
			if _, _, err := r.CreateRunBranch("rb", "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
				t.Errorf("CreateRunBranch with a bad base = %v", err)
			}
			if _, err := tgitErr(dir, "rev-parse", "--verify", "refs/heads/kusaw/rb"); err == nil {
				t.Error("a bad base still created the run branch")
			}
		})
	}
}

func TestEmptyRepo(t *testing.T) {
	needGit(t)
	dir := t.TempDir()
	tgit(t, dir, "init", "-q")
	r := open(t, dir)
	_, err := r.ResolveBase("")
	if err == nil || !strings.Contains(err.Error(), "no commits yet") {
		t.Fatalf("ResolveBase on an empty repo = %v", err)
	}
}

func TestOpenRepoErrors(t *testing.T) {
	needGit(t)
	plain := t.TempDir()
	file := filepath.Join(plain, "f")
	write(t, file, "x")
	for path, want := range map[string]string{
		plain:                           "is not a git repository",
		filepath.Join(plain, "missing"): "does not exist",
		file:                            "is not a directory",
	} {
		_, err := OpenRepo(path)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("OpenRepo(%s) = %v; want one line with %q", path, err, want)
		}
	}
	// A directory inside a repository opens the repository.
	dir := newRepo(t)
	write(t, filepath.Join(dir, "sub", "x"), "x")
	r, err := OpenRepo(filepath.Join(dir, "sub"))
	if err != nil || r.Path != dir {
		t.Fatalf("OpenRepo(sub) = %+v, %v", r, err)
	}
}

func TestNames(t *testing.T) {
	if got := AttemptBranch("20261130-x", "plan", 2); got != "kusaw/attempts/20261130-x/plan/2" {
		t.Fatal(got)
	}
	good := []string{"r1", "20261130T0249-ab12", "step_1", "a.b", "Plan"}
	bad := []string{"", ".hidden", "-x", "x.", "x.lock", "a..b", "a@{b", "@", "a b", "a/b", "a:b", "a~1", "a^", "a?", "a*", "a[", `a\b`, "a\x01"}
	for _, s := range good {
		if err := checkComponent("id", s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
	for _, s := range bad {
		if err := checkComponent("id", s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	dir := newRepo(t)
	r := open(t, dir)
	if _, _, err := r.CreateRunBranch("attempts", ""); err == nil {
		t.Error("run id 'attempts' accepted: it would collide with attempt branches")
	}
	if _, _, err := r.CreateRunBranch("x y", ""); err == nil || !strings.Contains(err.Error(), "invalid run id") {
		t.Errorf("run id with a space: %v", err)
	}
	run, _, err := r.CreateRunBranch("dup", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.CreateRunBranch("dup", ""); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second CreateRunBranch = %v", err)
	}
	// The run branch and its attempt branches coexist.
	w, err := r.AddAttempt(run, AttemptBranch("dup", "s", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddAttempt(run, AttemptBranch("dup", "s", 1), filepath.Join(t.TempDir(), "wt2")); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("reusing an attempt branch: %v", err)
	}
	if _, err := r.AddAttempt(run, "main", filepath.Join(t.TempDir(), "wt3")); err == nil {
		t.Error("AddAttempt on a non-kusaw branch accepted")
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
	assertClean(t, dir)
}

func TestAddAttemptRefusesNonEmptyDir(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("r", "")
	target := t.TempDir()
	write(t, filepath.Join(target, "keep.txt"), "mine\n")
	_, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), target)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("AddAttempt into a non-empty dir = %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "keep.txt")); string(b) != "mine\n" {
		t.Fatal("existing file touched")
	}
	if _, err := tgitErr(dir, "rev-parse", "--verify", "refs/heads/"+AttemptBranch("r", "s", 1)); err == nil {
		t.Fatal("branch created although the worktree was refused")
	}
	// An existing empty directory is fine.
	w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
}

// After a kill -9, a fresh Repo finds every kusaw worktree (with or without
// its directory) and removes them.
func TestLeftoversAfterCrash(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("r", "")
	state := t.TempDir()
	var made []*Worktree
	for i, s := range []string{"a", "b", "c"} {
		w, err := r.AddAttempt(run, AttemptBranch("r", s, 1), filepath.Join(state, s))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(w.Path, "junk"), "x")
		made = append(made, w)
		_ = i
	}
	// The user's own worktree is not kusaw's business.
	own := filepath.Join(t.TempDir(), "mine")
	tgit(t, dir, "worktree", "add", "-q", "-b", "feature", own)
	// One attempt directory vanished with the crash (tmpfs, rm -rf).
	if err := os.RemoveAll(made[1].Path); err != nil {
		t.Fatal(err)
	}

	r2 := open(t, dir)
	left, err := r2.ListKusawWorktrees()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 3 {
		t.Fatalf("found %d leftovers, want 3: %+v", len(left), left)
	}
	for _, w := range left {
		if !strings.HasPrefix(w.Branch, "kusaw/attempts/r/") || w.GitDir == "" || w.Path == "" {
			t.Errorf("leftover %+v", w)
		}
		if err := r2.RemoveWorktree(w); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := r2.ListKusawWorktrees(); len(left) != 0 {
		t.Fatalf("%d leftovers after cleanup", len(left))
	}
	if _, err := os.Stat(own); err != nil {
		t.Fatal("the user's own worktree was removed")
	}
	tgit(t, dir, "worktree", "remove", own)
	assertClean(t, dir)
}

// A step can leave a worktree git refuses to remove (its .git file replaced
// by a directory, the worktree locked, directories without write permission
// when not running as root); removal still succeeds.
func TestRemoveWorktreeTheStepLockedDown(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("r", "")
	w, _ := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
	tgit(t, dir, "worktree", "lock", w.Path)
	ro := filepath.Join(w.Path, "ro")
	write(t, filepath.Join(ro, "deep", "f"), "x")
	for _, d := range []string{filepath.Join(ro, "deep"), ro} {
		if err := os.Chmod(d, 0o500); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(w.Path, ".git")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, ".git", "config"), "[core]\n")
	// Show that git alone refuses this worktree.
	if out, err := tgitErr(dir, "worktree", "remove", "--force", "--force", w.Path); err == nil {
		t.Fatalf("git removed the worktree itself; the test no longer exercises the fallback: %s", out)
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Path); !os.IsNotExist(err) {
		t.Fatal("worktree directory still there")
	}
	assertClean(t, dir)
}

// RemoveWorktree must not delete a directory that is not one of the
// repository's worktrees, whatever a record says.
func TestRemoveWorktreeRefusesForeignDirs(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	victim := t.TempDir()
	write(t, filepath.Join(victim, "precious"), "x")
	for _, w := range []*Worktree{
		{Path: victim},
		{Path: dir},
		{Path: victim, GitDir: filepath.Join(victim, ".git")},
	} {
		if err := r.RemoveWorktree(w); err == nil {
			t.Errorf("RemoveWorktree(%+v) succeeded", w)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "precious")); err != nil {
		t.Fatal("a foreign directory was deleted")
	}
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Fatal("the main checkout was deleted")
	}
}

func TestConcurrentAttempts(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("r", "")
	state := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 1; i <= 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w, err := r.AddAttempt(run, AttemptBranch("r", "s", i), filepath.Join(state, "a", string(rune('0'+i)), "app"))
			if err == nil {
				write(t, filepath.Join(w.Path, "f"), "x")
				_, _, err = w.CommitAll("m")
			}
			if err == nil {
				err = r.RemoveWorktree(w)
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	assertClean(t, dir)
}

func TestBareRepository(t *testing.T) {
	src := newRepo(t)
	bare := filepath.Join(t.TempDir(), "app.git")
	tgit(t, "", "clone", "-q", "--bare", src, bare)
	tgit(t, bare, "config", "user.name", "Repo Owner")
	tgit(t, bare, "config", "user.email", "owner@example.test")
	r := open(t, bare)
	if !r.Bare || r.Path != "" {
		t.Fatalf("bare repo opened as %+v", r)
	}
	if d, err := r.Dirty(); d || err != nil {
		t.Fatalf("bare Dirty = %v, %v", d, err)
	}
	run, _, err := r.CreateRunBranch("r", "main")
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "f"), "x\n")
	sha, changed, err := w.CommitAll("m")
	if err != nil || !changed {
		t.Fatal(err, changed)
	}
	if err := r.AdvanceBranch(run, sha); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
	if list := tgit(t, bare, "worktree", "list", "--porcelain"); strings.Count(list, "worktree ") != 1 {
		t.Fatalf("worktrees left:\n%s", list)
	}
}
