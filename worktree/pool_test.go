package worktree

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// manifest describes a tree file by file as a checkout leaves it: type,
// permission bits (setuid and the like included), link target, content
// hash, the number of names a file has. .git is left out.
func manifest(t testing.TB, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil // (SkipDir on a file would skip the rest of its folder)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %o %o", rel, st.Mode&unix.S_IFMT, st.Mode&0o7777)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += fmt.Sprintf(" %s links=%d", hex.EncodeToString(sum[:8]), st.Nlink)
		}
		if n, _ := unix.Llistxattr(p, nil); n > 0 {
			line += " xattrs"
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// poolRepo is a repository with folders, an executable, a link and an
// ignored pattern, and a second commit that changes, adds and deletes.
func poolRepo(t *testing.T) (dir, c1, c2 string) {
	t.Helper()
	dir = newRepo(t)
	write(t, filepath.Join(dir, "src", "a.go"), "package a\n")
	write(t, filepath.Join(dir, "src", "deep", "b.go"), "package deep\n")
	write(t, filepath.Join(dir, "bin", "run.sh"), "#!/bin/sh\necho run\n")
	os.Chmod(filepath.Join(dir, "bin", "run.sh"), 0o755)
	os.Symlink("src/a.go", filepath.Join(dir, "link"))
	tgit(t, dir, "add", "-A")
	tgit(t, dir, "commit", "-q", "-m", "tree")
	c1 = tgit(t, dir, "rev-parse", "HEAD")
	write(t, filepath.Join(dir, "src", "a.go"), "package a // changed\n")
	write(t, filepath.Join(dir, "added.txt"), "new\n")
	tgit(t, dir, "rm", "-q", "gone.txt")
	tgit(t, dir, "add", "-A")
	tgit(t, dir, "commit", "-q", "-m", "second")
	c2 = tgit(t, dir, "rev-parse", "HEAD")
	tgit(t, dir, "reset", "-q", "--hard", c1)
	return dir, c1, c2
}

// freshManifest is the manifest of a plain git worktree add of commit.
func freshManifest(t *testing.T, dir, commit string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fresh")
	tgit(t, dir, "worktree", "add", "-q", "--detach", p, commit)
	m := manifest(t, p)
	tgit(t, dir, "worktree", "remove", "--force", p)
	if !strings.Contains(m, "src/deep/b.go") || !strings.Contains(m, "bin/run.sh 100000 755") {
		t.Fatalf("the manifest misses files:\n%s", m)
	}
	return m
}

// The attacks on a reused tree, each from the step's side: what it leaves
// in its worktree. After the next attempt takes the tree from the pool, the
// tree must equal a fresh checkout of that attempt's base, and it must
// have been reused (cleaned), not silently checked out afresh.
// poolAttack is one thing a step does to its tree before the release.
type poolAttack struct {
	name string
	do   func(t *testing.T, wt, gitDir string)
}

var poolAttacks = []poolAttack{
	{"untracked file", func(t *testing.T, wt, _ string) { write(t, filepath.Join(wt, "src", "planted.go"), "package evil\n") }},
	{"ignored file", func(t *testing.T, wt, _ string) { write(t, filepath.Join(wt, "debug.log"), "left\n") }},
	{"untracked folder without permissions", func(t *testing.T, wt, _ string) {
		write(t, filepath.Join(wt, "junk", "x", "y"), "y\n")
		os.Chmod(filepath.Join(wt, "junk", "x"), 0)
		os.Chmod(filepath.Join(wt, "junk"), 0)
	}},
	{"link where a tracked folder was", func(t *testing.T, wt, _ string) {
		outside := t.TempDir()
		write(t, filepath.Join(outside, "b.go"), "package outside\n")
		os.RemoveAll(filepath.Join(wt, "src", "deep"))
		os.Symlink(outside, filepath.Join(wt, "src", "deep"))
	}},
	{"fifo", func(t *testing.T, wt, _ string) {
		if err := syscall.Mkfifo(filepath.Join(wt, "src", "pipe"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(wt, "README"))
		syscall.Mkfifo(filepath.Join(wt, "README"), 0o644)
	}},
	{"socket", func(t *testing.T, wt, _ string) {
		fd, _ := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		defer syscall.Close(fd)
		if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: filepath.Join(wt, "sock")}); err != nil {
			t.Fatal(err)
		}
	}},
	{"file modes", func(t *testing.T, wt, _ string) {
		os.Chmod(filepath.Join(wt, "README"), 0o777)
		os.Chmod(filepath.Join(wt, "bin", "run.sh"), 0o644)
	}},
	{"folder modes", func(t *testing.T, wt, _ string) {
		os.Chmod(filepath.Join(wt, "src"), 0o777|fs.ModeSticky)
		os.Chmod(filepath.Join(wt, "src", "deep"), 0o700)
		os.Chmod(wt, 0o777)
	}},
	{"setuid", func(t *testing.T, wt, _ string) {
		os.Chmod(filepath.Join(wt, "bin", "run.sh"), 0o755|fs.ModeSetuid|fs.ModeSetgid)
	}},
	{"hard link between tracked files", func(t *testing.T, wt, _ string) {
		os.Remove(filepath.Join(wt, "src", "deep", "b.go"))
		os.Link(filepath.Join(wt, "README"), filepath.Join(wt, "src", "deep", "b.go"))
	}},
	{"file in the private git folder", func(t *testing.T, _ string, gitDir string) {
		write(t, filepath.Join(gitDir, "config.worktree"), "[core]\n\tfsmonitor = touch /tmp/kusaw-pwned\n")
		write(t, filepath.Join(gitDir, "info", "sparse-checkout"), "/nothing\n")
	}},
	{"git file pointing elsewhere", func(t *testing.T, wt, _ string) {
		other := t.TempDir()
		tgit(t, other, "init", "-q")
		os.Remove(filepath.Join(wt, ".git"))
		write(t, filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(other, ".git")+"\n")
	}},
	{"git folder of its own", func(t *testing.T, wt, _ string) {
		os.Remove(filepath.Join(wt, ".git"))
		tgit(t, wt, "init", "-q")
		write(t, filepath.Join(wt, ".git", "hooks", "post-checkout"), "#!/bin/sh\ntouch /tmp/kusaw-pwned\n")
	}},
	{"forged mtime and index", func(t *testing.T, wt, gitDir string) {
		// Same size, same mtime: only the ctime tells.
		p := filepath.Join(wt, "src", "a.go")
		fi, _ := os.Stat(p)
		os.WriteFile(p, []byte("package b\n"), 0o644)
		os.Chtimes(p, fi.ModTime(), fi.ModTime())
		// And the worktree's own index refreshed to claim it is clean.
		tgitErr(wt, "update-index", "--refresh")
	}},
	{"modified and deleted tracked files", func(t *testing.T, wt, _ string) {
		write(t, filepath.Join(wt, "src", "deep", "b.go"), "package changed\n")
		os.Remove(filepath.Join(wt, "link"))
		os.Symlink("/etc/passwd", filepath.Join(wt, "link"))
		os.Remove(filepath.Join(wt, ".gitignore"))
	}},
}

func TestPoolReuseEqualsFreshCheckout(t *testing.T) {
	isolateHome(t)
	dir, c1, c2 := poolRepo(t)
	want := map[string]string{c1: freshManifest(t, dir, c1), c2: freshManifest(t, dir, c2)}
	state := t.TempDir()
	for i, a := range poolAttacks {
		for _, v := range []struct {
			next   string
			commit bool // the tree is committed before its release: Release removes what the commit's survey found
		}{{c1, false}, {c2, false}, {c1, true}} {
			next := v.next
			name := map[string]string{c1: "same-base", c2: "new-base"}[next]
			if v.commit {
				name += "-committed"
			}
			t.Run(fmt.Sprintf("%s/next-%s", a.name, name), func(t *testing.T) {
				r := open(t, dir)
				pool := r.Pool(state)
				tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
				w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", fmt.Sprint(i, name), 1), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				if got := manifest(t, w.Path); got != want[c1] {
					t.Fatalf("the first checkout differs from git's:\n%s\nwant:\n%s", got, want[c1])
				}
				a.do(t, w.Path, w.GitDir)
				if v.commit {
					// git refuses to commit a FIFO where a tracked file was.
					if sha, _, err := w.CommitAll("m"); err != nil && a.name != "fifo" {
						t.Fatal(err)
					} else if err == nil {
						if files := tgit(t, dir, "ls-tree", "-r", "--name-only", sha); strings.Contains(files, "debug.log") {
							t.Errorf("an ignored file was committed:\n%s", files)
						}
					}
					if w.survey == nil {
						t.Fatal("the commit made no survey for Release")
					}
				}
				if ok, err := r.Release(w); !ok || err != nil {
					t.Fatalf("release: %v %v", ok, err)
				}
				assertPoolHoldsNoLeftover(t, pool, want[c1])
				tgit(t, dir, "update-ref", "refs/heads/kusaw/r", next)
				w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", fmt.Sprint(i, name), 2), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				if !w2.Reused {
					t.Errorf("the tree was not reused (%s)", w2.ReuseFailed)
				}
				if got := manifest(t, w2.Path); got != want[next] {
					t.Errorf("the reused tree differs from a fresh checkout of its base:\n%s\nwant:\n%s", got, want[next])
				}
				if st := tgit(t, w2.Path, "status", "--porcelain", "--ignored", "--untracked-files=all"); st != "" {
					t.Errorf("git status in the reused tree: %s", st)
				}
				// Its git folder is a new one of kusaw's, named by a .git
				// file of kusaw's.
				if g, err := readGitFile(w2.Path); err != nil || g != w2.GitDir {
					t.Errorf(".git of the reused tree names %q (%v), want %s", g, err, w2.GitDir)
				}
				ents, _ := os.ReadDir(w2.GitDir)
				for _, e := range ents {
					if n := e.Name(); n != "HEAD" && n != "commondir" && n != "gitdir" && n != "index" {
						t.Errorf("the reused tree's git folder holds %s", n)
					}
				}
				if _, err := os.Stat("/tmp/kusaw-pwned"); err == nil {
					t.Errorf("a program the step planted ran")
				}
				if err := r.RemoveWorktree(w2); err != nil {
					t.Fatal(err)
				}
				w2.DropIndex()
			})
		}
	}
}

// assertPoolHoldsNoLeftover: the pool's one idle tree has no path a fresh
// checkout (its manifest: want) lacks or has as another type, no .git,
// no folder of another mode or with extended attributes: what Release
// removes or repairs (tracked files' content waits for the take).
func assertPoolHoldsNoLeftover(t *testing.T, pool *Pool, want string) {
	t.Helper()
	idle, _ := filepath.Glob(filepath.Join(pool.Dir(), "idle-*", "tree"))
	if len(idle) != 1 {
		t.Fatalf("idle trees: %v", idle)
	}
	fresh := map[string]string{}
	for _, l := range strings.Split(want, "\n") {
		f := strings.Fields(l)
		fresh[f[0]] = l
	}
	for _, l := range strings.Split(manifest(t, idle[0]), "\n") {
		f := strings.Fields(l)
		w, ok := fresh[f[0]]
		switch {
		case !ok:
			t.Errorf("%s waits in the pool: %s", f[0], l)
		case f[1] != strings.Fields(w)[1]:
			t.Errorf("%s waits in the pool as another type: %s, want %s", f[0], l, w)
		case f[1] == "40000" && l != w:
			t.Errorf("folder %s waits in the pool as %s, want %s", f[0], l, w)
		}
	}
	if _, err := os.Lstat(filepath.Join(idle[0], ".git")); err == nil {
		t.Errorf(".git waits in the pool")
	}
}

// The twin: a step that adds, deletes, renames and chmods files commits
// exactly that, from the trusted index of a fresh checkout and of a reused
// tree alike.
func TestPoolCommitIsExactlyTheChange(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	// A user setting that would let a forged mtime hide a change.
	tgit(t, dir, "config", "core.trustctime", "false")
	tgit(t, dir, "config", "core.checkStat", "minimal")
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	for n := 1; n <= 2; n++ {
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", n), filepath.Join(state, "runs", fmt.Sprint(n), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		if (n == 2) != w.Reused {
			t.Fatalf("attempt %d: reused %v (%s)", n, w.Reused, w.ReuseFailed)
		}
		// The same changes in a plain clone, committed by git add -A.
		ref := refClone(t, dir, c1)
		for _, root := range []string{w.Path, ref} {
			write(t, filepath.Join(root, "new", "file.txt"), "added\n")
			os.Remove(filepath.Join(root, "gone.txt"))
			os.Rename(filepath.Join(root, "src", "deep", "b.go"), filepath.Join(root, "src", "moved.go"))
			os.Chmod(filepath.Join(root, "README"), 0o755)
			os.Chmod(filepath.Join(root, "bin", "run.sh"), 0o644)
			p := filepath.Join(root, "src", "a.go")
			fi, _ := os.Stat(p)
			os.WriteFile(p, []byte("package x\n"), 0o644)
			os.Chtimes(p, fi.ModTime(), fi.ModTime())
		}
		tgit(t, ref, "add", "-A")
		wantTree := tgit(t, ref, "write-tree")
		sha, changed, err := w.CommitAll("m")
		if err != nil || !changed {
			t.Fatalf("commit: %v changed=%v", err, changed)
		}
		if got := tgit(t, dir, "rev-parse", sha+"^{tree}"); got != wantTree {
			diff, _ := tgitErr(dir, "diff", "--stat", wantTree, got)
			t.Errorf("attempt %d committed tree %s, want %s:\n%s", n, got, wantTree, diff)
		}
		if ok, err := r.Release(w); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
}

// A step that commits inside its worktree: CommitAll starts from its
// commit (two-way read-tree from the base) and adds what it left on top.
func TestPoolCommitAfterStepCommitted(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 1), filepath.Join(state, "a", "app"), AddOptions{Pool: r.Pool(state)})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "src", "a.go"), "package inside\n")
	tgit(t, w.Path, "commit", "-q", "-am", "inside")
	write(t, filepath.Join(w.Path, "after.txt"), "after\n")
	os.Remove(filepath.Join(w.Path, "README"))
	sha, _, err := w.CommitAll("m")
	if err != nil {
		t.Fatal(err)
	}
	files := tgit(t, dir, "ls-tree", "-r", "--name-only", sha)
	if !strings.Contains(files, "after.txt") || strings.Contains(files, "README") {
		t.Errorf("commit holds:\n%s", files)
	}
	if got := tgit(t, dir, "show", sha+":src/a.go"); got != "package inside" {
		t.Errorf("src/a.go = %q", got)
	}
	if got := tgit(t, dir, "rev-parse", sha+"^"); got != tgit(t, dir, "rev-parse", AttemptBranch("r", "s", 1)+"^") {
		t.Errorf("parent is not the step's commit")
	}
}

// A crash mid-attempt leaves the tree in the attempt folder, never in the
// pool; a full pool leaves trees to RemoveWorktree; two takers never get
// the same tree.
func TestPoolHoldsOnlyReleasedTrees(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	var ws []*Worktree
	for n := 1; n <= PoolIdleMax+1; n++ {
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", n), filepath.Join(state, fmt.Sprint(n), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if pool.Idle() != 0 {
		t.Fatalf("trees in use are idle in the pool")
	}
	for i, w := range ws {
		ok, err := r.Release(w)
		if err != nil || ok != (i < PoolIdleMax) {
			t.Fatalf("release %d: %v %v", i, ok, err)
		}
		if !ok {
			if err := r.RemoveWorktree(w); err != nil {
				t.Fatal(err)
			}
			w.DropIndex()
		}
	}
	if pool.Idle() != PoolIdleMax {
		t.Fatalf("%d idle, want %d", pool.Idle(), PoolIdleMax)
	}
	seen := map[string]bool{}
	for n := 10; n < 10+PoolIdleMax+1; n++ {
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", n), filepath.Join(state, fmt.Sprint(n), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		if (n < 10+PoolIdleMax) != w.Reused {
			t.Errorf("attempt %d: reused %v (%s)", n, w.Reused, w.ReuseFailed)
		}
		var st unix.Stat_t
		unix.Stat(filepath.Join(w.Path, "README"), &st)
		key := fmt.Sprint(st.Ino)
		if seen[key] {
			t.Errorf("two attempts share a tree")
		}
		seen[key] = true
	}
	assertNoHeldLeft := func() {
		ents, _ := os.ReadDir(filepath.Join(pool.Dir(), "held"))
		if len(ents) != PoolIdleMax+1 {
			t.Errorf("%d held indexes for %d trees in use", len(ents), PoolIdleMax+1)
		}
	}
	assertNoHeldLeft()
	_ = time.Now
}

// A tree is cleaned when it is released (nothing the step left waits in
// the state folder) and again when it is taken: whatever changed it while
// it was idle (a process an unsandboxed step left running) is gone too.
func TestPoolCleansAtReleaseAndAtTake(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	want := freshManifest(t, dir, c1)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 1), filepath.Join(state, "1", "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "secret.log"), "token\n")
	syscall.Mkfifo(filepath.Join(w.Path, "pipe"), 0o644)
	if ok, err := r.Release(w); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	idle, _ := filepath.Glob(filepath.Join(pool.Dir(), "idle-*", "tree"))
	if len(idle) != 1 {
		t.Fatalf("idle trees: %v", idle)
	}
	for _, p := range []string{"secret.log", "pipe", ".git"} {
		if _, err := os.Lstat(filepath.Join(idle[0], p)); err == nil {
			t.Errorf("%s waits in the pool", p)
		}
	}
	// While idle.
	write(t, filepath.Join(idle[0], "late.txt"), "late\n")
	write(t, filepath.Join(idle[0], "src", "a.go"), "package late\n")
	w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 2), filepath.Join(state, "2", "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if !w2.Reused || w2.Cleaned.Untracked != 1 || w2.Cleaned.Changed < 1 { // (a file stamped in the tick of its index counts too)
		t.Errorf("reused %v, cleaned %+v (%s)", w2.Reused, w2.Cleaned, w2.ReuseFailed)
	}
	if got := manifest(t, w2.Path); got != want {
		t.Errorf("the reused tree differs from a fresh checkout:\n%s\nwant:\n%s", got, want)
	}
}

// A repository with a sparse checkout or per-worktree config gets git's
// own add, and its trees are not pooled (git's add sets up what they
// need); the commit still starts from the trusted index.
func TestPoolNotForSparseCheckouts(t *testing.T) {
	isolateHome(t)
	for _, kv := range [][2]string{{"core.sparseCheckout", "true"}, {"extensions.worktreeConfig", "true"}} {
		dir := newRepo(t)
		tgit(t, dir, "config", kv[0], kv[1])
		r := open(t, dir)
		run, _, err := r.CreateRunBranch("sparse", "")
		if err != nil {
			t.Fatal(err)
		}
		state := t.TempDir()
		w, err := r.AddAttemptWith(run, AttemptBranch("sparse", "s", 1), filepath.Join(state, "1", "app"), AddOptions{Pool: r.Pool(state)})
		if err != nil {
			t.Fatalf("%s: %v", kv[0], err)
		}
		write(t, filepath.Join(w.Path, "new.txt"), "new\n")
		sha, changed, err := w.CommitAll("m")
		if err != nil || !changed || !strings.Contains(tgit(t, dir, "ls-tree", "--name-only", sha), "new.txt") {
			t.Errorf("%s: commit %s %v %v", kv[0], sha, changed, err)
		}
		if ok, err := r.Release(w); ok || err != nil {
			t.Errorf("%s: a tree of git's own add was pooled (%v)", kv[0], err)
		}
		if err := r.RemoveWorktree(w); err != nil {
			t.Fatal(err)
		}
		w.DropIndex()
	}
}

// git tells racily clean entries by the second: a file checked out in the
// second its index was written is read and hashed again by every status
// and add until the index is written once more, later. The first reuse of
// a tree stamps its trusted index anew once the cleaning proved every
// entry (unracy), so the index the tree keeps from then on has no such
// entry.
func TestPoolReuseRewritesRacyIndex(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	racy := func(index string) int {
		idx, err := readTrustedIndex(index, len(c1))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range idx.entries {
			if int64(e.mtimeS) >= idx.written.Unix() {
				n++
			}
		}
		return n
	}
	// A small checkout takes milliseconds: its files share the index's
	// second. The index is stamped a microsecond after the last of them
	// (in the same second): what a large checkout gives, whose index is
	// written in a later clock tick than its files (kusaw's cleaning keeps
	// them) but in the same second (git hashes them again).
	var w *Worktree
	for try := 0; ; try++ {
		var err error
		w, err = r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", try+1), filepath.Join(state, "runs", fmt.Sprint(try), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		idx, err := readTrustedIndex(w.index, len(c1))
		if err != nil {
			t.Fatal(err)
		}
		var last time.Time
		for _, e := range idx.entries {
			if ct := time.Unix(int64(e.ctimeS), int64(e.ctimeN)); ct.After(last) {
				last = ct
			}
			if mt := time.Unix(int64(e.mtimeS), int64(e.mtimeN)); mt.After(last) {
				last = mt
			}
		}
		stamp := last.Add(time.Microsecond)
		if stamp.Unix() == last.Unix() {
			if err := os.Chtimes(w.index, stamp, stamp); err != nil {
				t.Fatal(err)
			}
			break
		}
		if try == 2 {
			t.Fatal("three checkouts ended at the turn of a second")
		}
		if err := r.RemoveWorktree(w); err != nil {
			t.Fatal(err)
		}
	}
	if n := racy(w.index); n == 0 {
		t.Fatal("no racily clean entry after the checkout: the test proves nothing")
	}
	if ok, err := r.Release(w); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
	w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 9), filepath.Join(state, "runs", "9", "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if !w2.Reused || w2.Cleaned.Total() > 0 {
		t.Fatalf("not reused as it was: %s %+v", w2.ReuseFailed, w2.Cleaned)
	}
	if n := racy(w2.index); n > 0 {
		t.Errorf("the reused tree's trusted index still has %d racily clean entries: every status and commit on it hashes them again", n)
	}
	if _, changed, err := w2.CommitAll("m"); err != nil || changed {
		t.Fatalf("commit: %v changed=%v", err, changed)
	}
}

// refClone is a clone of dir with base checked out: where git add -A of
// the same changes gives the tree a commit must have.
func refClone(t *testing.T, dir, base string) string {
	t.Helper()
	ref := filepath.Join(t.TempDir(), "ref")
	tgit(t, "", "clone", "-q", dir, ref)
	tgit(t, ref, "checkout", "-q", base)
	return ref
}
