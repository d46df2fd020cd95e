package worktree

import (
	"os"
	"path/filepath"
	"testing"
)

// A branch's ref read from git's files (fileRef) answers as git does: a
// loose ref, one only in packed-refs, one loose and packed at different
// commits (loose wins), a missing one; and it leaves to git what it
// cannot read exactly (a symbolic ref, a link, a name outside
// refs/heads/, a reftable repository), which git then answers.
func TestFileRefAnswersAsGit(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	main := tgit(t, dir, "rev-parse", "HEAD")
	write(t, filepath.Join(dir, "b.txt"), "b\n")
	tgit(t, dir, "add", "b.txt")
	tgit(t, dir, "commit", "-q", "-m", "second")
	second := tgit(t, dir, "rev-parse", "HEAD")
	tgit(t, dir, "branch", "kusaw/packed", main)
	tgit(t, dir, "branch", "kusaw/moved", main)
	tgit(t, dir, "pack-refs", "--all")
	tgit(t, dir, "branch", "-f", "kusaw/moved", second) // loose again, ahead of its packed line
	tgit(t, dir, "branch", "kusaw/loose", second)
	tgit(t, dir, "symbolic-ref", "refs/heads/kusaw/sym", "refs/heads/main")
	if err := os.Symlink("main", filepath.Join(r.CommonDir, "refs", "heads", "linked")); err != nil {
		t.Fatal(err)
	}
	common := r.CommonDir
	bin := binReader{g: r.git, dir: r.workDir(), common: common}
	for _, c := range []struct {
		name      string
		sha       string
		ok, done  bool
		gitAnswer bool // git (rev-parse) finds it
	}{
		{"refs/heads/kusaw/loose", second, true, true, true},
		{"refs/heads/kusaw/packed", main, true, true, true},
		{"refs/heads/kusaw/moved", second, true, true, true},
		{"refs/heads/main", second, true, true, true},
		{"refs/heads/kusaw/missing", "", false, true, false},
		{"refs/heads/kusaw/sym", "", false, false, true},   // symbolic: git's
		{"refs/heads/linked", "", false, false, false},     // a link: git's
		{"refs/tags/v1", "", false, false, false},          // not a branch: git's
		{"refs/heads/../../HEAD", "", false, false, false}, // not a name git accepts
		{"HEAD", "", false, false, true},
	} {
		sha, ok, done := fileRef(common, c.name)
		if sha != c.sha || ok != c.ok || done != c.done {
			t.Errorf("fileRef(%s) = %q, %v, done %v; want %q, %v, done %v", c.name, sha, ok, done, c.sha, c.ok, c.done)
		}
		// What the reader returns, fileRef or git, is git's answer.
		got, found, err := bin.ref(c.name)
		want, gerr := tgitErr(dir, "rev-parse", "--verify", "--quiet", c.name+"^{commit}")
		if err != nil || found != c.gitAnswer || found && got+"\n" != want {
			t.Errorf("ref(%s) = %q, %v, %v; git: %q, %v", c.name, got, found, err, want, gerr)
		}
	}
	// A reftable repository keeps no loose refs: git answers, not the files.
	if err := os.Mkdir(filepath.Join(common, "reftable"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, done := fileRef(common, "refs/heads/kusaw/loose"); done {
		t.Error("fileRef read a reftable repository's files")
	}
}
