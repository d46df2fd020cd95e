package worker

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
)

// The worker's check of its cache answers as git does: a commit it holds
// yes; one it does not, a short or malformed hash, a blob, no.
func TestHoldsCommit(t *testing.T) {
	testkit.NeedGit(t)
	dir := filepath.Join(t.TempDir(), "cache")
	testkit.GitRun(t, "", "init", "-q", dir)
	testkit.GitRun(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "one")
	head := strings.TrimSpace(testkit.GitRun(t, dir, "rev-parse", "HEAD"))
	out, err := exec.Command("git", "-C", dir, "hash-object", "-w", "--stdin").Output()
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(string(out))
	ctx := context.Background()
	if !holdsCommit(ctx, dir, head) {
		t.Errorf("HEAD %s not held", head)
	}
	for _, no := range []string{strings.Repeat("2", 40), head[:10], blob, "HEAD", "--all"} {
		if holdsCommit(ctx, dir, no) {
			t.Errorf("holdsCommit(%q) is true", no)
		}
	}
	// The cache repository missing: no, as git says.
	if holdsCommit(ctx, filepath.Join(t.TempDir(), "none"), head) {
		t.Error("a missing cache holds a commit")
	}
}
