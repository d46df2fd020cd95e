package worktree

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// adminFiles lists the names in a worktree's administrative folder.
func adminFiles(t *testing.T, dir string) []string {
	t.Helper()
	e, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range e {
		names = append(names, x.Name())
	}
	sort.Strings(names)
	return names
}

// A worktree made without `git worktree add` is one git itself knows as
// such: listed on its branch, clean, its files checked out, its folder
// holding what git's add leaves (no lock), and removable by git.
func TestAddPlainIsAGitWorktree(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	r := open(t, dir)
	if !r.plainAdd {
		t.Fatal("a repository without sparse checkout or per-worktree config should get plain adds")
	}
	run, head, err := r.CreateRunBranch("plain", "")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	w, err := r.AddAttempt(run, AttemptBranch("plain", "s", 1), filepath.Join(state, "a1", "app"))
	if err != nil {
		t.Fatal(err)
	}
	if b := tgit(t, w.Path, "rev-parse", "--abbrev-ref", "HEAD"); b != w.Branch {
		t.Errorf("HEAD is on %q, want %q", b, w.Branch)
	}
	if s := tgit(t, w.Path, "status", "--porcelain"); s != "" {
		t.Errorf("a new worktree is not clean:\n%s", s)
	}
	if b, err := os.ReadFile(filepath.Join(w.Path, "README")); err != nil || string(b) != "hello\n" {
		t.Errorf("README: %q %v", b, err)
	}
	list := tgit(t, dir, "worktree", "list", "--porcelain")
	if !strings.Contains(list, "worktree "+w.Path+"\n") || !strings.Contains(list, "branch refs/heads/"+w.Branch) {
		t.Errorf("git worktree list does not show it:\n%s", list)
	}
	if w.BaseSHA != head {
		t.Errorf("base %s, want %s", w.BaseSHA, head)
	}
	// What git's own add leaves, side by side.
	gp := filepath.Join(state, "g1", "app")
	tgit(t, dir, "worktree", "add", "-q", "-b", "plain-git", gp, head)
	gitAdmin, err := readGitFile(gp)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := adminFiles(t, w.GitDir), adminFiles(t, gitAdmin)
	for _, f := range []string{"HEAD", "commondir", "gitdir", "index"} {
		if !slices.Contains(ours, f) || !slices.Contains(theirs, f) {
			t.Errorf("%s: ours %v, git's %v", f, ours, theirs)
		}
	}
	if slices.Contains(ours, "locked") {
		t.Errorf("the worktree is still locked: %v", ours)
	}
	for _, f := range []string{"HEAD", "commondir"} {
		a, _ := os.ReadFile(filepath.Join(w.GitDir, f))
		b, _ := os.ReadFile(filepath.Join(gitAdmin, f))
		if f == "HEAD" {
			b = []byte(strings.Replace(string(b), "plain-git", w.Branch, 1))
		}
		if string(a) != string(b) {
			t.Errorf("%s: ours %q, git's %q", f, a, b)
		}
	}
	// A second attempt of the same repo gets its own folder.
	w2, err := r.AddAttempt(run, AttemptBranch("plain", "s", 2), filepath.Join(state, "a2", "app"))
	if err != nil {
		t.Fatal(err)
	}
	if w2.GitDir == w.GitDir {
		t.Fatalf("two worktrees share %s", w.GitDir)
	}
	for _, x := range []*Worktree{w, w2} {
		if err := r.RemoveWorktree(x); err != nil {
			t.Fatal(err)
		}
	}
	if list := tgit(t, dir, "worktree", "list", "--porcelain"); strings.Contains(list, state+"/a") {
		t.Errorf("removed worktrees still listed:\n%s", list)
	}
}

// A repository whose config asks for what git's add copies (a sparse
// checkout, per-worktree config) gets git's add.
func TestAddPlainNotWithSparseCheckout(t *testing.T) {
	isolateHome(t)
	for _, kv := range [][2]string{{"core.sparseCheckout", "true"}, {"extensions.worktreeConfig", "true"}} {
		dir := newRepo(t)
		tgit(t, dir, "config", kv[0], kv[1])
		r := open(t, dir)
		if r.plainAdd {
			t.Errorf("%s: plain adds on", kv[0])
		}
		run, _, err := r.CreateRunBranch("sparse", "")
		if err != nil {
			t.Fatal(err)
		}
		w, err := r.AddAttempt(run, AttemptBranch("sparse", "s", 1), filepath.Join(t.TempDir(), "app"))
		if err != nil {
			t.Fatalf("%s: %v", kv[0], err)
		}
		if err := r.RemoveWorktree(w); err != nil {
			t.Fatal(err)
		}
	}
}

// A checkout that fails (a tree whose blob is missing) leaves no branch,
// no registration and no files behind.
func TestAddPlainFailureLeavesNothing(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	blob := strings.Repeat("1", 40)
	out, err := tgitStdin(dir, "100644 blob "+blob+"\tlost.txt\n", "mktree", "--missing")
	if err != nil {
		t.Fatalf("mktree: %v %s", err, out)
	}
	bad := tgit(t, dir, "commit-tree", "-m", "missing blob", strings.TrimSpace(out))
	tgit(t, dir, "update-ref", "refs/heads/kusaw/broken", bad)
	r := open(t, dir)
	p := filepath.Join(t.TempDir(), "x", "app")
	br := AttemptBranch("broken", "s", 1)
	if _, err := r.AddAttempt("kusaw/broken", br, p); err == nil || !strings.Contains(err.Error(), "read-tree") {
		t.Fatalf("a worktree of a commit whose blob is missing: %v", err)
	}
	if _, err := tgitErr(dir, "rev-parse", "--verify", "-q", "refs/heads/"+br); err == nil {
		t.Errorf("branch %s left behind", br)
	}
	if e, _ := os.ReadDir(filepath.Join(r.CommonDir, "worktrees")); len(e) != 0 {
		t.Errorf("registrations left behind: %v", e)
	}
	if _, err := os.Stat(p); err == nil {
		t.Errorf("%s left behind", p)
	}
	// Twin: the good commit still works on the same repository.
	run, _, err := r.CreateRunBranch("good", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddAttempt(run, AttemptBranch("good", "s", 1), p); err != nil {
		t.Fatal(err)
	}
}

// A path already registered (a crash left its registration) is refused,
// as git refuses it.
func TestAddPlainRefusesRegisteredPath(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	r := open(t, dir)
	run, head, err := r.CreateRunBranch("reg", "")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "app")
	tgit(t, dir, "worktree", "add", "-q", "-b", "other", p, head)
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddAttempt(run, AttemptBranch("reg", "s", 1), p); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("a registered path was taken: %v", err)
	}
	tgit(t, dir, "worktree", "prune")
	if _, err := r.AddAttempt(run, AttemptBranch("reg", "s", 1), p); err != nil {
		t.Fatalf("after prune: %v", err)
	}
}

func tgitStdin(dir, stdin string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	return string(out), err
}

// A worker's attempt makes its run branch and its attempt branch in one
// go: both at the base; a run branch that exists already is refused and
// then nothing is made. The same holds where git's own add is used.
func TestAddAttemptNewRun(t *testing.T) {
	isolateHome(t)
	for _, sparse := range []bool{false, true} {
		dir := newRepo(t)
		if sparse {
			tgit(t, dir, "config", "core.sparseCheckout", "false")
		}
		r := open(t, dir)
		base := tgit(t, dir, "rev-parse", "HEAD")
		run, att := RunBranch("w.s.1"), AttemptBranch("w", "s", 1)
		w, err := r.AddAttemptNewRun(run, base, att, filepath.Join(t.TempDir(), "app"))
		if err != nil {
			t.Fatalf("sparse=%v: %v", sparse, err)
		}
		for _, b := range []string{run, att} {
			if got := tgit(t, dir, "rev-parse", "refs/heads/"+b); got != base {
				t.Errorf("sparse=%v: %s at %q, want %s", sparse, b, got, base)
			}
		}
		if w.BaseSHA != base {
			t.Errorf("base %s", w.BaseSHA)
		}
		// Again on the same run branch: refused, no second attempt branch.
		att2 := AttemptBranch("w", "s", 2)
		p2 := filepath.Join(t.TempDir(), "app")
		if _, err := r.AddAttemptNewRun(run, base, att2, p2); err == nil {
			t.Errorf("sparse=%v: an existing run branch was taken", sparse)
		}
		if _, err := os.Stat(p2); err == nil {
			t.Errorf("sparse=%v: the refused attempt's worktree was left", sparse)
		}
		if list := tgit(t, dir, "worktree", "list", "--porcelain"); strings.Contains(list, p2) {
			t.Errorf("sparse=%v: the refused attempt's worktree is registered:\n%s", sparse, list)
		}
		if _, err := tgitErr(dir, "rev-parse", "--verify", "-q", "refs/heads/"+att2); err == nil {
			t.Errorf("sparse=%v: %s was made though its run branch was refused", sparse, att2)
		}
		if _, err := r.AddAttemptNewRun(RunBranch("w.s.3"), "HEAD", AttemptBranch("w", "s", 3), filepath.Join(t.TempDir(), "app")); err == nil {
			t.Errorf("sparse=%v: a base that is not a hash was taken", sparse)
		}
	}
}
