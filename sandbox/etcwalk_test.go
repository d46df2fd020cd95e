//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"slices"
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
