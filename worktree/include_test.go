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

// TestCopyIgnoredWorktreeLinks: the worktree is the step's. A run branch
// whose earlier step committed config as a link out of the worktree (or a
// step that swaps the folder for a link while it runs) must not make kusaw
// write or remove a file outside it, on the host, through that link.
func TestCopyIgnoredWorktreeLinks(t *testing.T) {
	home := t.TempDir()
	src := filepath.Join(home, "src")
	os.MkdirAll(filepath.Join(src, "config"), 0o755)
	tgit(t, src, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(src, ".gitignore"), []byte("config/local.yaml\n"), 0o644)
	os.WriteFile(filepath.Join(src, "config", "local.yaml"), []byte("db: secret\n"), 0o600)
	outside := t.TempDir()

	// Attack 1: the checkout holds config -> outside (a committed link).
	dst := t.TempDir()
	os.Symlink(outside, filepath.Join(dst, "config"))
	got, err := CopyIgnored(src, dst, []string{"config/*.yaml"}, "")
	if err == nil {
		t.Error("include through a link out of the worktree gave no error")
	}
	if _, err := os.Lstat(filepath.Join(outside, "local.yaml")); err == nil {
		t.Fatal("include wrote local.yaml outside the worktree through the worktree's link config")
	}
	if len(got) != 0 {
		t.Fatalf("copied %v through a link", got)
	}

	// Attack 2: the step replaces config with a link to a folder holding
	// a file of the same name; kusaw's clean-up must not remove it.
	dst2 := t.TempDir()
	got, err = CopyIgnored(src, dst2, []string{"config/*.yaml"}, "")
	if err != nil || strings.Join(got, ",") != "config/local.yaml" {
		t.Fatalf("twin copy: %v %v", got, err)
	}
	victim := filepath.Join(outside, "local.yaml")
	os.WriteFile(victim, []byte("the user's"), 0o600)
	os.RemoveAll(filepath.Join(dst2, "config"))
	os.Symlink(outside, filepath.Join(dst2, "config"))
	RemoveCopied(dst2, got)
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("include's clean-up removed a file outside the worktree through the step's link: %v", err)
	}

	// Twin: a plain worktree gets the file, and the clean-up removes it.
	dst3 := t.TempDir()
	got, err = CopyIgnored(src, dst3, []string{"config/*.yaml"}, "")
	if err != nil || strings.Join(got, ",") != "config/local.yaml" {
		t.Fatalf("twin copy: %v %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst3, "config", "local.yaml")); string(b) != "db: secret\n" {
		t.Fatalf("twin content %q", b)
	}
	RemoveCopied(dst3, got)
	if _, err := os.Lstat(filepath.Join(dst3, "config", "local.yaml")); err == nil {
		t.Fatal("the clean-up left the copied file")
	}
}
