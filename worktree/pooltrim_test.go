package worktree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// pooledTrees releases n trees of r into its pool under state.
func pooledTrees(t *testing.T, r *Repo, state string, n int) *Pool {
	t.Helper()
	p := r.Pool(state)
	c := tgit(t, r.Path, "rev-parse", "HEAD")
	tgit(t, r.Path, "update-ref", "refs/heads/kusaw/r", c)
	var ws []*Worktree
	for i := 0; i < n; i++ {
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 100+i+p.Idle()*10), filepath.Join(state, "runs", fmt.Sprint(time.Now().UnixNano()), "app"), AddOptions{Pool: p})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		if ok, err := r.Release(w); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
	return p
}

// idleSlots are the pool's idle slots, by name.
func idleSlots(t *testing.T, p *Pool) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(p.Dir(), "idle-*"))
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	sort.Strings(m)
	return m
}

func setIdleSince(t *testing.T, p *Pool, slot string, when time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(p.Dir(), slot, "base"), when, when); err != nil {
		t.Fatal(err)
	}
}

func trimmed(ts []TrimmedTree) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Tree+": "+t.Why+t.Error)
	}
	return strings.Join(s, "; ")
}

// kusaw gc's trimming: a tree idle longer than PoolIdleMaxAge, the oldest
// beyond PoolIdleMax, and every tree of a repository no longer in the
// factory file go; --dry-run lists exactly them and changes nothing; the
// trees that stay are still taken and reused.
func TestTrimPools(t *testing.T) {
	isolateHome(t)
	dir, _, _ := poolRepo(t)
	r := open(t, dir)
	state := t.TempDir()
	p := pooledTrees(t, r, state, PoolIdleMax)
	slots := idleSlots(t, p)
	now := time.Now()
	old := slots[0]
	setIdleSince(t, p, old, now.Add(-PoolIdleMaxAge-time.Hour))
	// Two more beyond the count (as two releases at once can leave):
	// copies of a slot, idle for a day and for two.
	for i, name := range []string{"idle-extra1", "idle-extra2"} {
		cp := filepath.Join(p.Dir(), name)
		if err := copyTree(filepath.Join(p.Dir(), slots[1]), cp); err != nil {
			t.Fatal(err)
		}
		setIdleSince(t, p, name, now.Add(-time.Duration(i+1)*24*time.Hour))
	}
	// Another repository's pool: no longer in the factory file.
	other := open(t, newRepo(t))
	op := pooledTrees(t, other, state, 1)
	otherSlot := idleSlots(t, op)[0]

	keep := map[string]bool{r.PoolName(): true}
	want := otherSlot + ": its repository is not in the factory file; " + old + ": idle more than 7d; idle-extra2: beyond the newest 4"
	dry, err := TrimPools(state, keep, now, true)
	if err != nil || sortedTrim(dry) != sortedWant(want) {
		t.Fatalf("dry run: %q %v\nwant %q", trimmed(dry), err, want)
	}
	if len(idleSlots(t, p)) != PoolIdleMax+2 || len(idleSlots(t, op)) != 1 {
		t.Fatal("a dry run removed trees")
	}
	got, err := TrimPools(state, keep, now, false)
	if err != nil || sortedTrim(got) != sortedWant(want) {
		t.Fatalf("trim: %q %v\nwant %q", trimmed(got), err, want)
	}
	left := idleSlots(t, p)
	if strings.Join(left, " ") != strings.Join(without(append(slots[1:], "idle-extra1"), old), " ") {
		t.Fatalf("left %v", left)
	}
	if _, err := os.Lstat(op.Dir()); !os.IsNotExist(err) {
		t.Errorf("the pool of a repository no longer in the factory file stayed: %v", err)
	}
	// What stays is as good as before.
	w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 1), filepath.Join(state, "next", "app"), AddOptions{Pool: p})
	if err != nil || !w.Reused {
		t.Fatalf("a kept tree: %v %v %s", err, w != nil && w.Reused, w.ReuseFailed)
	}
	if again, _ := TrimPools(state, keep, now, false); len(again) != 0 {
		t.Errorf("a second pass trims %q", trimmed(again))
	}
}

func sortedTrim(ts []TrimmedTree) string {
	return sortedWant(trimmed(ts))
}

func sortedWant(s string) string {
	parts := strings.Split(s, "; ")
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

func without(s []string, drop string) []string {
	var out []string
	for _, x := range s {
		if x != drop {
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// copyTree copies a slot (files, folders, links) for a test.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// gc never removes a tree an attempt has taken: one in use (in its
// attempt's folder, its index held) is not the pool's to trim, whatever
// the bounds, and goes back to the pool at its release; one taken between
// gc's decision and its claim stays whole with the attempt that took it.
func TestTrimPoolsLeavesTakenTrees(t *testing.T) {
	isolateHome(t)
	dir, _, _ := poolRepo(t)
	r := open(t, dir)
	state := t.TempDir()
	p := pooledTrees(t, r, state, 2)
	for _, s := range idleSlots(t, p) {
		setIdleSince(t, p, s, time.Now().Add(-30*24*time.Hour))
	}
	inUse, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 1), filepath.Join(state, "a1", "app"), AddOptions{Pool: p})
	if err != nil || !inUse.Reused {
		t.Fatalf("take: %v", err)
	}
	before := manifest(t, inUse.Path)
	// The race: the other idle tree is taken between gc's decision and
	// its claim (as Pool.take does, by rename).
	var taken string
	var takenIndex string
	trimClaimed = func(slot string) {
		taken = filepath.Join(state, "a2", "app")
		os.MkdirAll(filepath.Dir(taken), 0o755)
		idx, _, _, ok := p.take(taken)
		if !ok {
			t.Errorf("the racing attempt found no tree")
		}
		takenIndex = idx
	}
	defer func() { trimClaimed = nil }()
	got, err := TrimPools(state, map[string]bool{}, time.Now(), false) // the repository is gone from the file, even
	trimClaimed = nil
	if err != nil || len(got) != 0 {
		t.Fatalf("gc trimmed %q (%v): the only idle tree was taken before its claim", trimmed(got), err)
	}
	if m := manifest(t, inUse.Path); m != before {
		t.Fatalf("the tree in use changed:\n%s\nwas\n%s", m, before)
	}
	if m := manifest(t, taken); m != before {
		t.Fatalf("the tree taken in the race is not whole:\n%s", m)
	}
	if _, err := os.Stat(takenIndex); err != nil {
		t.Errorf("the racing attempt's held index went: %v", err)
	}
	if _, err := os.Stat(inUse.index); err != nil {
		t.Fatalf("the held index of the tree in use went: %v", err)
	}
	if ok, err := r.Release(inUse); !ok || err != nil {
		t.Fatalf("the tree in use goes back to the pool at its end: %v %v", ok, err)
	}
}

// gc follows no link out of the pool folder: a pool folder that is a link
// is skipped, a slot that is a link loses the link only, a link inside a
// trimmed tree is removed, not followed, and a state folder whose pool is
// a link is refused.
func TestTrimPoolsFollowsNoLink(t *testing.T) {
	isolateHome(t)
	dir, _, _ := poolRepo(t)
	r := open(t, dir)
	state := t.TempDir()
	p := pooledTrees(t, r, state, 1)
	slot := idleSlots(t, p)[0]
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "not kusaw's\n")
	// A slot of the outside's shape, so that following a link would trim it.
	write(t, filepath.Join(outside, "idle-x", "base"), "0000000000000000000000000000000000000000\n")
	write(t, filepath.Join(outside, "idle-x", "tree", "f"), "f\n")
	os.Symlink(outside, filepath.Join(p.Dir(), "idle-link"))
	os.Symlink(outside, filepath.Join(state, "pool", "evil-000000000000"))
	os.Symlink(outside, filepath.Join(p.Dir(), slot, "tree", "escape"))
	keep := map[string]bool{r.PoolName(): true, "evil-000000000000": true}
	setIdleSince(t, p, slot, time.Now().Add(-PoolIdleMaxAge-time.Hour))
	got, err := TrimPools(state, keep, time.Now(), false)
	if err != nil || sortedTrim(got) != sortedWant(slot+": idle more than 7d; idle-link: incomplete slot") {
		t.Fatalf("trimmed %q %v", trimmed(got), err)
	}
	// Not kept either: the link to a pool folder is still not followed.
	if _, err := TrimPools(state, map[string]bool{}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		for _, f := range []string{"secret", "idle-x/base", "idle-x/tree/f"} {
			if _, err := os.Stat(filepath.Join(outside, f)); err != nil {
				t.Fatalf("gc followed a link out of the pool: %s: %v", f, err)
			}
		}
	}
	check()
	if _, err := os.Lstat(filepath.Join(p.Dir(), "idle-link")); !os.IsNotExist(err) {
		t.Errorf("the link slot stayed: %v", err)
	}
	linked := t.TempDir()
	os.Symlink(outside, filepath.Join(linked, "pool"))
	if _, err := TrimPools(linked, nil, time.Now(), false); err == nil {
		t.Error("a pool folder that is a link was walked")
	}
	check()
}
