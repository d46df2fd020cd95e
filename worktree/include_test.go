package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyIgnored: only ignored regular files are copied, never through a
// link, never from a dot-folder of home, and the mode is kept.
func TestCopyIgnored(t *testing.T) {
	home := t.TempDir()
	src := filepath.Join(home, "src", "app")
	os.MkdirAll(src, 0o755)
	tgit(t, src, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(src, ".gitignore"), []byte(".env\n*.local\nlink.env\nsecrets/\n"), 0o644)
	os.WriteFile(filepath.Join(src, ".env"), []byte("A=1\n"), 0o600)
	os.WriteFile(filepath.Join(src, "tracked.local"), []byte("x"), 0o644) // ignored by pattern, but...
	os.WriteFile(filepath.Join(src, "plain.txt"), []byte("not ignored"), 0o644)
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id"), []byte("KEY"), 0o600)
	os.Symlink(filepath.Join(home, ".ssh", "id"), filepath.Join(src, "link.env"))
	// A folder of the checkout that is a link into a dot-folder of home.
	os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(src, "secrets"))

	dst := t.TempDir()
	got, err := CopyIgnored(src, dst, []string{".env", "*.local", "plain.txt", "link.env", "secrets/id"}, home)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != ".env,tracked.local" {
		t.Fatalf("copied %v, want .env and tracked.local", got)
	}
	fi, err := os.Stat(filepath.Join(dst, ".env"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf(".env in the worktree: %v %v", fi, err)
	}
	for _, no := range []string{"plain.txt", "link.env", "secrets/id"} {
		if _, err := os.Lstat(filepath.Join(dst, no)); err == nil {
			t.Errorf("%s was copied", no)
		}
	}
	// Existing files in the worktree are left alone.
	os.WriteFile(filepath.Join(dst, "tracked.local"), []byte("mine"), 0o644)
	os.Remove(filepath.Join(dst, ".env"))
	if got, _ := CopyIgnored(src, dst, []string{"*.local", ".env"}, home); strings.Join(got, ",") != ".env" {
		t.Fatalf("second copy: %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "tracked.local")); string(b) != "mine" {
		t.Fatal("an existing file was overwritten")
	}
}
