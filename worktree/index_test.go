package worktree

import (
	"path/filepath"
	"strings"
	"testing"
)

// The trusted index reader takes what git writes (versions 2 to 4) and
// refuses an index with entries git would skip: assume-unchanged,
// skip-worktree, intent-to-add, or a merge's stages.
func TestReadTrustedIndex(t *testing.T) {
	isolateHome(t)
	dir, _, _ := poolRepo(t)
	index := filepath.Join(dir, ".git", "index")
	want := tgit(t, dir, "ls-files")
	for _, v := range []string{"2", "3", "4"} {
		tgit(t, dir, "update-index", "--index-version", v)
		idx, err := readTrustedIndex(index, 40)
		if err != nil {
			t.Fatalf("version %s: %v", v, err)
		}
		var names []string
		for _, e := range idx.entries {
			names = append(names, e.name)
		}
		if got := strings.Join(names, "\n"); got != want {
			t.Errorf("version %s: paths\n%s\nwant\n%s", v, got, want)
		}
	}
	for _, flag := range []string{"--assume-unchanged", "--skip-worktree"} {
		tgit(t, dir, "update-index", flag, "README")
		if _, err := readTrustedIndex(index, 40); err == nil {
			t.Errorf("an index with %s README was accepted", flag)
		}
		tgit(t, dir, "update-index", strings.Replace(flag, "--", "--no-", 1), "README")
	}
	write(t, filepath.Join(dir, "later.txt"), "x\n")
	tgit(t, dir, "add", "-N", "later.txt")
	if _, err := readTrustedIndex(index, 40); err == nil {
		t.Errorf("an index with an intent-to-add entry was accepted")
	}
	tgit(t, dir, "reset", "-q")
	if _, err := readTrustedIndex(index, 40); err != nil {
		t.Fatal(err)
	}
	// A byte changed: the checksum no longer matches.
	data, _ := readRegular(index, maxIndexSize)
	data[20] ^= 1
	if _, err := parseIndex(data, 20); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("a damaged index: %v", err)
	}
}
