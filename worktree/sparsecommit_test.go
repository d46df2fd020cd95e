package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A commit made elsewhere (a cluster worker's, on a whole tree) keeps
// repos.NAME.sparse's rule once KeepOutsideCone is applied: every path
// outside the cone (changed, deleted, added, a file turned into a folder
// and a folder into a file, a link) is as in the base, in a commit on top
// of the worker's; the cone's edits and the files of the top and of the
// folders leading to the cone stay. Twin: a commit that edits only the
// cone comes back unchanged, with no commit added.
func TestKeepOutsideConeOfAForeignCommit(t *testing.T) {
	dir := sparseRepo(t)
	r := open(t, dir)
	base := tgit(t, dir, "rev-parse", "HEAD")
	write(t, filepath.Join(dir, "a/b/f"), "cone edit\n")
	write(t, filepath.Join(dir, "a/f"), "parent's file\n")
	tgit(t, dir, "commit", "-qam", "cone")
	cone := tgit(t, dir, "rev-parse", "HEAD")
	got, paths, err := r.KeepOutsideCone(base, cone, []string{"a/b"})
	if err != nil || got != cone || len(paths) != 0 {
		t.Fatalf("twin: %s %v %v, want %s unchanged", got, paths, err, cone)
	}
	write(t, filepath.Join(dir, "a/x/f"), "forged\n")
	os.RemoveAll(filepath.Join(dir, "d"))
	write(t, filepath.Join(dir, "d"), "a file where a folder was\n")
	os.Remove(filepath.Join(dir, "a/b/c/f"))
	write(t, filepath.Join(dir, "planted/deep/x"), "planted\n")
	os.Symlink("/etc/passwd", filepath.Join(dir, "a/x/link"))
	tgit(t, dir, "add", "-A")
	tgit(t, dir, "commit", "-qm", "own")
	head := tgit(t, dir, "rev-parse", "HEAD")
	got, paths, err = r.KeepOutsideCone(base, head, []string{"a/b"})
	if err != nil {
		t.Fatal(err)
	}
	if got == head || tgit(t, dir, "rev-parse", got+"^") != head {
		t.Fatalf("not a commit on top of the worker's: %s", got)
	}
	if o, want := outside(t, dir, got), outside(t, dir, base); o != want {
		t.Errorf("outside the cone:\n%s\nwant as in the base:\n%s", o, want)
	}
	diff := tgit(t, dir, "diff", "--name-status", "--no-renames", base, got)
	if want := "D\ta/b/c/f\nM\ta/b/f\nM\ta/f"; diff != want {
		t.Errorf("the kept commit changes\n%s\nwant\n%s", diff, want)
	}
	if strings.Join(paths, " ") == "" || tgit(t, dir, "status", "--porcelain") != "" {
		t.Errorf("paths %v; the checkout or index moved: %s", paths, tgit(t, dir, "status", "--porcelain"))
	}
	if _, _, err := r.KeepOutsideCone(base, head, []string{"../x"}); err == nil {
		t.Error("a folder outside the repository was taken")
	}
}
