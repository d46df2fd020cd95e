package worktree

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A tree reused on an unchanged base keeps the index of its last
// checkout as it was, mtime included (copyIndex must: git tells racily
// clean entries by it; unracy stamps it once), so after a week of such
// reuse the held index of a tree in use carries a week-old mtime. The
// sweep of what a crashed kusaw left must not take it for one: Release
// (its own, or another attempt's) would remove the index of a running
// attempt, and its tree would be thrown away instead of pooled.
func TestSweepKeepsTheHeldIndexOfATreeInUse(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	add := func(n int) *Worktree {
		t.Helper()
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", n), filepath.Join(state, "runs", string(rune('a'+n)), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w, other := add(1), add(2)
	week := time.Now().Add(-8 * 24 * time.Hour)
	if err := os.Chtimes(w.index, week, week); err != nil { // the checkout's time, 8 days ago
		t.Fatal(err)
	}
	if ok, err := r.Release(other); !ok || err != nil {
		t.Fatalf("release of the other attempt: %v %v", ok, err)
	}
	if _, err := os.Stat(w.index); err != nil {
		t.Fatalf("another attempt's release swept the held index of a tree in use: %v", err)
	}
	if ok, err := r.Release(w); !ok || err != nil {
		t.Errorf("the tree in use does not go back to the pool: %v %v", ok, err)
	}
}

// The twin: a held index no attempt has touched for longer than a week
// (what a crashed kusaw left) still goes.
func TestSweepRemovesAbandonedHeldIndexes(t *testing.T) {
	p := &Pool{dir: t.TempDir(), max: PoolIdleMax}
	held, err := p.newHeld()
	if err != nil {
		t.Fatal(err)
	}
	write(t, held, "DIRC")
	p.sweepAt(time.Now().Add(heldMaxAge - time.Hour))
	if _, err := os.Stat(held); err != nil {
		t.Fatalf("a held index younger than %v went: %v", heldMaxAge, err)
	}
	p.sweepAt(time.Now().Add(heldMaxAge + time.Hour))
	if _, err := os.Stat(held); err == nil {
		t.Errorf("a held index older than %v stays", heldMaxAge)
	}
}
