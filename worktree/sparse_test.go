package worktree

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sparseRepo: files at the top, in the folders leading to a/b, inside
// a/b, and beside it (a/x, d).
func sparseRepo(t *testing.T) string {
	t.Helper()
	dir := newRepo(t)
	for _, f := range []string{"top.txt", "a/f", "a/b/f", "a/b/c/f", "a/x/f", "d/f", "d/e/f"} {
		write(t, filepath.Join(dir, f), f+"\n")
	}
	tgit(t, dir, "add", "-A")
	tgit(t, dir, "commit", "-q", "-m", "sparse")
	return dir
}

func files(t *testing.T, root string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" {
			return nil // a file in a worktree (SkipDir would skip the rest of its folder)
		}
		if !d.IsDir() {
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, " ")
}

// outside is the listing of commit's paths that a cone of a/b leaves out.
func outside(t *testing.T, dir, commit string) string {
	t.Helper()
	var keep []string
	for _, l := range strings.Split(tgit(t, dir, "ls-tree", "-r", "--full-tree", commit), "\n") {
		if _, p, ok := strings.Cut(l, "\t"); ok && !inCone([]string{"a/b"}, p) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// A sparse worktree checks out the cone (git's cone mode: a/b whole, the
// files of the top and of a), git there finds it clean, and its tree
// never goes to the pool.
func TestSparseWorktreeChecksOutTheCone(t *testing.T) {
	isolateHome(t)
	dir := sparseRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("sp", "")
	state := t.TempDir()
	w, err := r.AddAttemptWith(run, AttemptBranch("sp", "s", 1), filepath.Join(state, "1", "app"), AddOptions{Pool: r.Pool(state), Sparse: []string{"a/b/"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := files(t, w.Path); got != ".gitignore README a/b/c/f a/b/f a/f gone.txt top.txt" {
		t.Fatalf("sparse tree holds %q", got)
	}
	if st := tgit(t, w.Path, "status", "--porcelain", "--ignored"); st != "" {
		t.Errorf("git status in the sparse tree: %q", st)
	}
	if _, err := w.StartMerge(tgit(t, dir, "rev-parse", "HEAD")); err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("a merge in a sparse tree: %v", err)
	}
	if ok, err := r.Release(w); ok || err != nil {
		t.Errorf("a sparse tree was pooled (%v)", err)
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
	w.DropIndex()
	assertClean(t, dir)
}

// The patterns are the ones git sparse-checkout set --cone writes.
func TestSparsePatternsAreGits(t *testing.T) {
	needGit(t)
	dir := sparseRepo(t)
	folders := []string{"d/e", "a/b", "a/b/c", "a/x/"}
	args := append([]string{"sparse-checkout", "set", "--cone"}, folders...)
	tgit(t, dir, args...)
	want, err := os.ReadFile(filepath.Join(dir, ".git", "info", "sparse-checkout"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sparsePatterns(folders); got != string(want) {
		t.Fatalf("patterns:\n%s\ngit's:\n%s", got, want)
	}
}

// Attack: a step of a sparse attempt changes, adds and deletes files
// outside its cone, in its files and with a commit of its own (as it may
// with the git its sandbox has); the attempt's commit keeps every path
// outside the cone exactly as in the base. Twin: what it changed inside
// the cone is committed exactly.
func TestSparseCommitKeepsOutsideAsBase(t *testing.T) {
	isolateHome(t)
	dir := sparseRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("sp", "")
	base := tgit(t, dir, "rev-parse", run)
	state := t.TempDir()
	w, err := r.AddAttemptWith(run, AttemptBranch("sp", "s", 1), filepath.Join(state, "1", "app"), AddOptions{Pool: r.Pool(state), Sparse: []string{"a/b"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.RemoveWorktree(w); w.DropIndex() }()
	// Inside the cone (the twin's part).
	write(t, filepath.Join(w.Path, "a", "b", "f"), "changed\n")
	write(t, filepath.Join(w.Path, "a", "b", "new"), "new\n")
	os.Remove(filepath.Join(w.Path, "a", "b", "c", "f"))
	// Outside: a file of the base written back changed, new files beside
	// it and in a new folder, and a file turned into a folder.
	write(t, filepath.Join(w.Path, "d", "f"), "forged\n")
	write(t, filepath.Join(w.Path, "d", "added"), "added\n")
	write(t, filepath.Join(w.Path, "z", "new"), "new\n")
	write(t, filepath.Join(w.Path, "a", "x", "f", "inner"), "folder where a file was\n")
	// The step's own commit deletes a file outside the cone and adds one.
	sh := exec.Command("sh", "-c", `set -e
git update-index --force-remove d/e/f
echo own > own.txt && mkdir -p q && echo q > q/committed && git add -f --sparse q/committed
git -c user.name=s -c user.email=s@s commit -q -m step --no-verify
`)
	sh.Dir = w.Path
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the step's commit: %v\n%s", err, out)
	}
	if !strings.Contains(tgit(t, dir, "diff", "--name-status", base, w.Branch), "d/e/f") {
		t.Fatal("the step's own commit did not delete d/e/f: the attack proves nothing")
	}
	sha, changed, err := w.CommitAll("m")
	if err != nil || !changed {
		t.Fatalf("commit: %v %v", changed, err)
	}
	if got, want := outside(t, dir, sha), outside(t, dir, base); got != want {
		t.Fatalf("outside the cone, the commit has:\n%s\nthe base has:\n%s", got, want)
	}
	got := tgit(t, dir, "diff", "--name-status", "--no-renames", base, sha)
	want := "M\ta/b/f\nA\ta/b/new\nD\ta/b/c/f\nA\town.txt"
	if sortLines(got) != sortLines(want) {
		t.Fatalf("the commit changed:\n%s\nwant exactly:\n%s", got, want)
	}
}

func sortLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

func TestCheckSparse(t *testing.T) {
	for _, ok := range [][]string{{"a"}, {"a/b/", "services/api"}, {"x.y_z-1"}} {
		if err := CheckSparse(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range [][]string{nil, {""}, {"."}, {".."}, {"../x"}, {"/abs"}, {"a/../../x"}, {"a/*"}, {"a/.git"}, {".git"}, {" a"}, {"a\nb"}, {"!a"}, {"a//b"}} {
		if err := CheckSparse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
