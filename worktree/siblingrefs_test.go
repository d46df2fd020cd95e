package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A step can write its own branch but not move, add or remove the other
// attempts' branches beside it: Restore puts the folder back.
func TestRefGuardRestoresSiblings(t *testing.T) {
	needGit(t)
	isolateHome(t)
	r := open(t, newRepo(t))
	runBranch, _, err := r.CreateRunBranch("r1", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first, err := r.AddAttempt(runBranch, AttemptBranch("r1", "build", 1), filepath.Join(dir, "a1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.AddAttempt(runBranch, AttemptBranch("r1", "build", 2), filepath.Join(dir, "a2"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := second.GuardSiblingRefs()
	if err != nil {
		t.Fatal(err)
	}
	heads := filepath.Join(second.CommonDir, "refs", "heads")
	firstRef := filepath.Join(heads, filepath.FromSlash(first.Branch))
	ownRef := filepath.Join(heads, filepath.FromSlash(second.Branch))
	orig, _ := os.ReadFile(firstRef)
	// What a step inside could do to the folder it may write:
	os.WriteFile(firstRef, []byte(strings.Repeat("0", 40)+"\n"), 0o644)  // move a sibling
	os.WriteFile(filepath.Join(filepath.Dir(ownRef), "99"), orig, 0o644) // add a branch
	os.WriteFile(ownRef, []byte(strings.Repeat("1", 40)+"\n"), 0o644)    // its own: allowed
	// Entries that are not refs, sorting before the moved sibling: the
	// guard must neither stop at them nor open them.
	dangling := filepath.Join(filepath.Dir(ownRef), "0-dangling")
	fifo := filepath.Join(filepath.Dir(ownRef), "0-fifo")
	if err := os.Symlink("/nonexistent-kusaw", dangling); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	repaired, found, err := g.Restore()
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found[0].Path != dangling || found[1].Path != fifo {
		t.Errorf("findings %v, want the dangling link and the FIFO", found)
	}
	for _, p := range []string{dangling, fifo} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was left", p)
		}
	}
	if got, _ := os.ReadFile(firstRef); string(got) != string(orig) {
		t.Fatalf("the sibling branch was not put back: %q", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(ownRef), "99")); err == nil {
		t.Fatal("an added branch was left")
	}
	if got, _ := os.ReadFile(ownRef); !strings.HasPrefix(string(got), "1111") {
		t.Fatal("the attempt's own branch must stay as the step left it")
	}
	if len(repaired) != 2 {
		t.Fatalf("repaired %v, want the moved and the added branch", repaired)
	}
	// Twin: untouched siblings mean nothing to repair.
	g2, _ := second.GuardSiblingRefs()
	if rep, found, err := g2.Restore(); err != nil || len(rep) != 0 || len(found) != 0 {
		t.Fatalf("nothing changed, yet repaired %v %v (%v)", rep, found, err)
	}
}
