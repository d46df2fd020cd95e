package dispatch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kusaw/kusaw/cluster"
)

func gitRepo(t *testing.T) (dir string, commits []string) {
	t.Helper()
	dir = t.TempDir()
	run := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q")
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
		run("add", n)
		run("commit", "-q", "-m", n)
		commits = append(commits, run("rev-parse", "HEAD"))
	}
	return dir, commits
}

// Attempts dispatched at once on the same base share one bundle made
// once (the same file, whichever order their have lists come in); another
// commit or another have list gets its own, each a bundle that imports
// the commit it names; a failed make is not kept.
func TestBundleCacheSharesOneMake(t *testing.T) {
	repo, c := gitRepo(t)
	var bc bundleCache
	defer bc.close()
	ctx := context.Background()
	paths := make([]string, 8)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			have := []string{c[0], "0000000000000000000000000000000000000000"}
			if i%2 == 1 {
				have[0], have[1] = have[1], have[0]
			}
			p, release, err := bc.get(ctx, repo, c[1], have)
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			paths[i] = p
		}()
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("attempts asking for the same bundle got %v: made more than once", paths)
		}
	}
	full, release, err := bc.get(ctx, repo, c[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if full == paths[0] {
		t.Fatal("a full bundle is the incremental one")
	}
	// Each imports what it names: the full one into an empty repository,
	// the shared increment on top of its base.
	dst := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", "--bare", dst).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if _, err := cluster.ImportBundle(ctx, dst, paths[0]); err == nil {
		t.Fatal("the increment imported without its base")
	}
	if tip, err := cluster.ImportBundle(ctx, dst, full); err != nil || tip != c[1] {
		t.Fatalf("the full bundle: %s %v", tip, err)
	}
	if _, _, err := bc.get(ctx, repo, "1111111111111111111111111111111111111111", nil); err == nil {
		t.Fatal("a bundle of a commit the repo lacks was made")
	}
	bc.mu.Lock()
	n := len(bc.entries)
	bc.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d bundles kept, want 2 (a failed one is not kept)", n)
	}
}

// Past maxBundles the oldest bundle nobody reads goes, its file too; one
// being read stays.
func TestBundleCacheEvictsOldestUnread(t *testing.T) {
	repo, c := gitRepo(t)
	var bc bundleCache
	defer bc.close()
	ctx := context.Background()
	first, keep, err := bc.get(ctx, repo, c[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	second, release, err := bc.get(ctx, repo, c[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	release()
	for i := 0; i < maxBundles; i++ {
		// Distinct have lists: distinct bundles of the same commit.
		_, release, err := bc.get(ctx, repo, c[1], []string{c[0], fmt.Sprintf("%040x", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	if _, err := os.Stat(first); err != nil {
		t.Errorf("a bundle being read was removed: %v", err)
	}
	if _, err := os.Stat(second); err == nil {
		t.Error("the oldest unread bundle is still kept past maxBundles")
	}
	keep()
}
