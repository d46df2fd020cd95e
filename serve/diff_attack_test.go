package serve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
)

// serve runs git diff on the host over commits a sandboxed step wrote. The
// user's own git config names programs (a textconv, a diff driver, an
// external diff); the step's .gitattributes picks which files they apply
// to. None of them may run, and a link in the tree is shown as a link, its
// target never read.
func TestComputeDiffRunsNoProgramAndFollowsNoLink(t *testing.T) {
	testkit.NeedGit(t)
	home := t.TempDir()
	marks := t.TempDir()
	cfg := "[diff \"evil\"]\n\ttextconv = touch '" + marks + "/textconv' && cat\n\tcommand = touch '" + marks + "/driver' && true\n" +
		"[diff]\n\texternal = touch '" + marks + "/external' && true\n"
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "host-secret")
	os.WriteFile(secret, []byte("hunter2-host-only\n"), 0o600)

	repo := t.TempDir()
	gitIn(t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "a.txt"), []byte("one\n"), 0o644)
	gitIn(t, repo, "add", ".")
	gitIn(t, repo, "commit", "-q", "-m", "base")
	base := strings.TrimSpace(testkit.GitRun(t, repo, "rev-parse", "HEAD"))
	// The step's commit: attributes that name the user's driver, a change
	// under it, and a link to a host file.
	os.WriteFile(filepath.Join(repo, ".gitattributes"), []byte("* diff=evil\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "a.txt"), []byte("two\n"), 0o644)
	if err := os.Symlink(secret, filepath.Join(repo, "leak")); err != nil {
		t.Fatal(err)
	}
	gitIn(t, repo, "add", ".")
	gitIn(t, repo, "commit", "-q", "-m", "step")
	head := strings.TrimSpace(testkit.GitRun(t, repo, "rev-parse", "HEAD"))

	t.Setenv("HOME", home) // now serve's git reads the user's config above
	files, _, err := computeDiff(context.Background(), repo, base, head)
	if err != nil {
		t.Fatal(err)
	}
	if ran, _ := os.ReadDir(marks); len(ran) != 0 {
		t.Fatalf("the diff ran programs the user's config names, on files the step chose: %v", ran)
	}
	by := map[string]DiffFile{}
	for _, f := range files {
		by[f.Path] = f
	}
	// The twin: the change is there, and the link is its target's name.
	if !strings.Contains(by["a.txt"].Patch, "+two") || !strings.Contains(by["leak"].Patch, "+"+secret) {
		t.Fatalf("diff: %+v", files)
	}
	for _, f := range files {
		if strings.Contains(f.Patch, "hunter2") {
			t.Fatalf("the diff read the file behind a link: %q", f.Patch)
		}
	}
}
