package worktree

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Retention deletes a run's branches: only that run's, never another run's
// whose id begins the same, never a branch that is not kusaw's, never one
// checked out.
func TestDeleteRunBranches(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	for _, b := range []string{"kusaw/r1", "kusaw/attempts/r1/build/1", "kusaw/attempts/r1/build/2", "kusaw/attempts/r1/test/1",
		"kusaw/r10", "kusaw/attempts/r10/build/1", "feature/kusaw/r1", "r1", "kusaw/attempts/r1x/build/1"} {
		tgit(t, dir, "branch", b)
	}
	// Packed and loose refs both.
	tgit(t, dir, "pack-refs", "--all")
	tgit(t, dir, "branch", "kusaw/attempts/r1/fix/1")
	// A checkout on one of the run's branches keeps it.
	tgit(t, dir, "worktree", "add", "-q", filepath.Join(t.TempDir(), "co"), "kusaw/attempts/r1/test/1")
	r := open(t, dir)

	all, err := r.KusawBranches()
	if err != nil {
		t.Fatal(err)
	}
	if len(all["r1"]) != 5 || len(all["r10"]) != 2 || len(all["r1x"]) != 1 || len(all) != 3 {
		t.Errorf("KusawBranches: %v", all)
	}
	// Another run's branch handed in as this run's is refused.
	if _, _, err := r.DeleteBranchesOf("r1", all["r10"]); err == nil {
		t.Error("DeleteBranchesOf took another run's branches")
	}
	deleted, left, err := r.DeleteBranchesOf("r1", all["r1"])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	want := []string{"kusaw/attempts/r1/build/1", "kusaw/attempts/r1/build/2", "kusaw/attempts/r1/fix/1", "kusaw/r1"}
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
	if !slices.Equal(left, []string{"kusaw/attempts/r1/test/1"}) {
		t.Errorf("left %v, want the checked-out branch", left)
	}
	got := strings.Fields(tgit(t, dir, "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
	slices.Sort(got)
	rest := []string{"feature/kusaw/r1", "kusaw/attempts/r1/test/1", "kusaw/attempts/r10/build/1", "kusaw/attempts/r1x/build/1", "kusaw/r10", "main", "r1"}
	if !slices.Equal(got, rest) {
		t.Errorf("branches now %v, want %v", got, rest)
	}
	// Nothing left to do the second time.
	if d, _, err := r.DeleteRunBranches("r1"); err != nil || len(d) != 0 {
		t.Errorf("second delete: %v, %v", d, err)
	}
}

// A run id that is not one refuses before git sees it: no pattern that
// reaches other branches.
func TestRunBranchesRefusesBadIDs(t *testing.T) {
	isolateHome(t)
	dir := newRepo(t)
	tgit(t, dir, "branch", "kusaw/r1")
	r := open(t, dir)
	for _, id := range []string{"", "../x", "*", "r*", "attempts", "a/b", "-x", ".."} {
		if _, _, err := r.DeleteRunBranches(id); err == nil {
			t.Errorf("run id %q: no error", id)
		}
	}
	if out := tgit(t, dir, "branch", "--list", "kusaw/r1"); out == "" {
		t.Error("kusaw/r1 is gone")
	}
}
