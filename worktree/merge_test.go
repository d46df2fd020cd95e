package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// commitOn makes a commit on a new branch from main with files set.
func commitOn(t *testing.T, dir, branch string, files map[string]string) string {
	t.Helper()
	tgit(t, dir, "checkout", "-q", "-b", branch, "main")
	for name, content := range files {
		write(t, filepath.Join(dir, name), content)
	}
	tgit(t, dir, "add", "-A")
	tgit(t, dir, "commit", "-q", "-m", branch)
	sha := tgit(t, dir, "rev-parse", "HEAD")
	tgit(t, dir, "checkout", "-q", "main")
	return sha
}

func TestMergeCleanThenConflict(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	base := tgit(t, dir, "rev-parse", "main")
	a := commitOn(t, dir, "a", map[string]string{"a.txt": "a\n"})
	b := commitOn(t, dir, "b", map[string]string{"b.txt": "b\n"})
	c := commitOn(t, dir, "c", map[string]string{"README": "changed by c\n"})
	d := commitOn(t, dir, "d", map[string]string{"README": "changed by d\n"})
	r := open(t, dir)

	m1, err := r.Merge(base, a, "merge a")
	if err != nil {
		t.Fatal(err)
	}
	m2, err := r.Merge(m1, b, "merge b")
	if err != nil {
		t.Fatal(err)
	}
	if got := tgit(t, dir, "ls-tree", "--name-only", m2); !strings.Contains(got, "a.txt") || !strings.Contains(got, "b.txt") {
		t.Fatalf("merged tree lacks a work: %s", got)
	}
	if parents := tgit(t, dir, "rev-list", "--parents", "-n1", m2); parents != m2+" "+m1+" "+b {
		t.Fatalf("parents of the merge: %s", parents)
	}
	// Merging what is already in: nothing new.
	if again, err := r.Merge(m2, a, "again"); err != nil || again != m2 {
		t.Fatalf("merge of a merged commit: %s %v", again, err)
	}
	m3, err := r.Merge(m2, c, "merge c")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Merge(m3, d, "merge d")
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) {
		t.Fatalf("want a conflict, got %v", err)
	}
	if len(ce.Files) != 1 || ce.Files[0] != "README" {
		t.Fatalf("conflicted files: %v", ce.Files)
	}
	assertClean(t, dir)

	// A resolve worktree: the conflicted merge, edited, committed with
	// both parents.
	if err := r.SetBranch("kusaw/r1", "", m3); err != nil {
		t.Fatal(err)
	}
	wt, err := r.AddAttempt("kusaw/r1", "kusaw/attempts/r1/fix/1", filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := wt.StartMerge(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0] != "README" {
		t.Fatalf("conflicts in the worktree: %v", files)
	}
	b2, _ := os.ReadFile(filepath.Join(wt.Path, "README"))
	if !strings.Contains(string(b2), "<<<<<<<") {
		t.Fatalf("no conflict markers: %s", b2)
	}
	write(t, filepath.Join(wt.Path, "README"), "both\n")
	sha, _, err := wt.CommitAll("resolved")
	if err != nil {
		t.Fatal(err)
	}
	if parents := tgit(t, dir, "rev-list", "--parents", "-n1", sha); parents != sha+" "+m3+" "+d {
		t.Fatalf("parents of the resolved merge: %s", parents)
	}
	if got := tgit(t, dir, "show", sha+":README"); got != "both" {
		t.Fatalf("resolved README: %q", got)
	}
	if err := r.RemoveWorktree(wt); err != nil {
		t.Fatal(err)
	}

	// Export: the files of a commit, no git folder.
	out := filepath.Join(t.TempDir(), "export")
	if err := r.Export(sha, out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "b.txt")); string(b) != "b\n" {
		t.Fatalf("export lacks b.txt: %q", b)
	}
	if _, err := os.Stat(filepath.Join(out, ".git")); err == nil {
		t.Fatal("export has a .git")
	}
	// SetBranch refuses a stale old value.
	if err := r.SetBranch("kusaw/r1", base, sha); err == nil {
		t.Fatal("SetBranch moved a branch that was not at old")
	}
}

func TestPatchSize(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	base := tgit(t, dir, "rev-parse", "main")
	small := commitOn(t, dir, "small", map[string]string{"a.txt": "a\n"})
	big := commitOn(t, dir, "big", map[string]string{"a.txt": strings.Repeat("line\n", 5000), "bin.dat": "\x00\x01\x02" + strings.Repeat("\xff", 4000)})
	r := open(t, dir)
	s, err := r.PatchSize(base, small)
	if err != nil || s <= 0 {
		t.Fatalf("small: %d %v", s, err)
	}
	b, err := r.PatchSize(base, big)
	if err != nil || b < 25000 || b <= s {
		t.Fatalf("big (with a binary file): %d %v; small %d", b, err, s)
	}
	if z, err := r.PatchSize(base, base); err != nil || z != 0 {
		t.Fatalf("no change: %d %v", z, err)
	}
}
