//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// TestUnreadableBelowMatchesTheWalk: the descriptor walk of /etc finds
// exactly what filepath.WalkDir's walk finds, in the same order (the
// plan's mounts and so its bind order do not change), on the machine's
// /etc and on a tree with each case: a root-only file and folder (not
// entered), a group-only file, links to both kinds, a pipe, deep folders.
func TestUnreadableBelowMatchesTheWalk(t *testing.T) {
	root := t.TempDir()
	mk := func(p string, mode os.FileMode) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("a/public.conf", 0o644)
	mk("a/b/c/d/deep.key", 0o600)
	mk("a/group.conf", 0o640)
	mk("private/inner.pem", 0o644)
	mk("z.key", 0o400)
	mk("aa", 0o644)
	os.Chmod(filepath.Join(root, "private"), 0o700)
	os.Mkdir(filepath.Join(root, "listonly"), 0o711)
	os.Symlink("z.key", filepath.Join(root, "link.key"))
	os.Symlink("private", filepath.Join(root, "link-dir"))
	if err := syscall.Mkfifo(filepath.Join(root, "a/pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []unreadable{
		{root + "/a/b/c/d/deep.key", false},
		{root + "/a/group.conf", false},
		{root + "/listonly", true},
		{root + "/private", true},
		{root + "/z.key", false},
	}
	if got := unreadableBelow(root); !slices.Equal(got, want) {
		t.Errorf("the descriptor walk found\n%v\nwant\n%v", got, want)
	}
	if got := unreadableBelowWalk(root); !slices.Equal(got, want) {
		t.Errorf("the walk by path found\n%v\nwant\n%v", got, want)
	}
	if got, ref := unreadableBelow("/etc"), unreadableBelowWalk("/etc"); !slices.Equal(got, ref) {
		t.Errorf("on /etc the descriptor walk found\n%v\nthe walk by path\n%v", got, ref)
	}
	if unreadableBelow(filepath.Join(root, "missing")) != nil {
		t.Error("a missing root gave entries")
	}
}

// TestSharedWalkSameAsOneWalk: the walk taken in turns by several
// goroutines (the one started ahead and the plan's) finds exactly what
// one walk finds, in the same order, on the machine's /etc and on a tree
// whose entries each hold something to find.
func TestSharedWalkSameAsOneWalk(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 40; i++ {
		d := filepath.Join(root, fmt.Sprintf("d%02d", i), "sub")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "secret.key"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%02d.key", i)), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{root, "/etc"} {
		want := unreadableBelowWalk(dir)
		for round := 0; round < 20; round++ {
			w := startWalk(dir)
			var wg sync.WaitGroup
			for g := 0; g < 3; g++ {
				wg.Add(1)
				go func() { defer wg.Done(); w.help() }()
			}
			w.help()
			got := w.result()
			wg.Wait()
			if !slices.Equal(got, want) {
				t.Fatalf("%s walked by four goroutines found\n%v\none walk\n%v", dir, got, want)
			}
		}
	}
	if dir := root; len(unreadableBelowWalk(dir)) != 80 {
		t.Fatalf("the tree holds %d entries to find, want 80", len(unreadableBelowWalk(dir)))
	}
	// The walk on a goroutine of its own, with the plan's help.
	ch := make(chan []unreadable, 1)
	help := walkOnGoroutine(root, ch)
	got, ok := help()
	if !ok {
		got = <-ch
	}
	if !slices.Equal(got, unreadableBelowWalk(root)) {
		t.Errorf("the walk on its goroutine with help found\n%v", got)
	}
	if ok && !slices.Equal(<-ch, got) {
		t.Errorf("the walk's goroutine sent another list than the plan had")
	}
}
