package worktree

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// RemoveUnregistered removes what no repository registered in an
// attempt's worktrees folder (a tree a crash left between its take from
// the pool and its registration, the slot's stage folder), leaves a
// registered worktree to RemoveWorktree, and removes a link without
// following it.
func TestRemoveUnregistered(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("r", "")
	folder := filepath.Join(t.TempDir(), "worktrees")
	w, err := r.AddAttempt(run, AttemptBranch("r", "s", 1), filepath.Join(folder, "app"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(folder, "other", "README"), "a tree nothing registered\n")
	write(t, filepath.Join(folder, ".pool-other", "base"), "x\n")
	outside := t.TempDir()
	write(t, filepath.Join(outside, "keep"), "not kusaw's\n")
	if err := os.Symlink(outside, filepath.Join(folder, "link")); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveUnregistered(folder, []*Repo{r})
	sort.Strings(removed)
	if err != nil || strings.Join(removed, " ") != ".pool-other link other" {
		t.Fatalf("removed %q, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(w.Path, "README")); err != nil {
		t.Errorf("the registered worktree was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a link was followed: %v", err)
	}
	// A folder that is itself a link is refused.
	ln := filepath.Join(t.TempDir(), "wts")
	os.Symlink(outside, ln)
	if _, err := RemoveUnregistered(ln, []*Repo{r}); err == nil {
		t.Error("a linked worktrees folder was walked")
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a linked folder was emptied: %v", err)
	}
	if err := r.RemoveWorktree(w); err != nil {
		t.Fatal(err)
	}
}
