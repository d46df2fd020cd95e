package worktree

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// More attacks on a reused tree, run by TestPoolReuseEqualsFreshCheckout
// with the others.
func init() {
	poolAttacks = append(poolAttacks, []poolAttack{
		{"same-size tracked files swapped, times restored", func(t *testing.T, wt, _ string) {
			a, b := filepath.Join(wt, "src", "a.go"), filepath.Join(wt, "src", "x.go")
			fi, _ := os.Stat(a)
			write(t, b, "package Z\n") // as long as a.go's "package a\n"
			os.Chtimes(b, fi.ModTime(), fi.ModTime())
			if err := os.Rename(b, a); err != nil {
				t.Fatal(err)
			}
		}},
		{"extended attribute on a tracked file", func(t *testing.T, wt, _ string) {
			if err := unix.Lsetxattr(filepath.Join(wt, "README"), "user.kusaw", []byte("x"), 0); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("the temp folder takes no user xattrs (%v): point TMPDIR at a filesystem that does (ext4, xfs, btrfs)", err)
				}
				t.Skipf("no user xattrs here: %v", err) // tmpfs without user xattrs
			}
		}},
		{"odd names", func(t *testing.T, wt, _ string) {
			write(t, filepath.Join(wt, "src", "new\nline"), "x\n")
			write(t, filepath.Join(wt, "src", "\xff\xfe"), "x\n")
			write(t, filepath.Join(wt, "SRC", "a.go"), "package evil\n")
			write(t, filepath.Join(wt, "src", "-rf"), "x\n")
		}},
		{"untracked chain beyond PATH_MAX", func(t *testing.T, wt, _ string) { deepUnreadableChain(t, wt) }},
		{"tracked link retargeted, same length", func(t *testing.T, wt, _ string) {
			os.Remove(filepath.Join(wt, "link"))
			os.Symlink("/etc/pas", filepath.Join(wt, "link")) // "src/a.go" is 8 bytes
		}},
	}...)
}

// deepUnreadableChain makes, below dir, folders nested deeper than
// PATH_MAX with a file in the last one, which loses all its permissions.
func deepUnreadableChain(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 200)
	for i := 0; i < 30; i++ { // 6,000 bytes deep
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	if f, err := unix.Openat(fd, "leak", unix.O_CREAT|unix.O_WRONLY, 0o644); err == nil {
		unix.Close(f)
	}
	unix.Fchmod(fd, 0)
	unix.Close(fd)
}

// The attack: a step (as a user whom permissions bind) nests folders
// beyond PATH_MAX and makes the last unreadable. Its tree must still be
// removed (before, the path walk that restores permissions stopped at
// PATH_MAX: the tree stayed in the state folder, out of every cleaning).
// As root the test also runs itself as uid 65534, where it matters.
func TestForceRemoveDeepUnreadableChain(t *testing.T) {
	if dir := os.Getenv("KUSAW_TEST_REMOVE_AS_USER"); dir != "" {
		tree := filepath.Join(dir, "tree")
		if err := os.Mkdir(tree, 0o755); err != nil {
			t.Fatal(err)
		}
		deepUnreadableChain(t, tree)
		if err := forceRemoveAll(tree); err != nil {
			t.Fatalf("as uid %d: %v", os.Getuid(), err)
		}
		if _, err := os.Lstat(tree); err == nil {
			t.Fatalf("as uid %d: the tree is still there", os.Getuid())
		}
		return
	}
	tree := filepath.Join(t.TempDir(), "tree")
	os.Mkdir(tree, 0o755)
	deepUnreadableChain(t, tree)
	if err := forceRemoveAll(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tree); err == nil {
		t.Fatal("the tree is still there")
	}
	if os.Getuid() != 0 {
		t.Setenv("KUSAW_TEST_REMOVE_AS_USER", t.TempDir())
		TestForceRemoveDeepUnreadableChain(t)
		return
	}
	// As root: the same as uid 65534, from a copy of this test binary it
	// may run, in a folder it owns.
	dir, err := os.MkdirTemp("", "kusaw-remove-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forceRemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "worktree.test")
	copyExe(t, os.Args[0], bin)
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	os.Chown(work, 65534, 65534)
	cmd := exec.Command(bin, "-test.run", "^TestForceRemoveDeepUnreadableChain$", "-test.v")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "KUSAW_TEST_REMOVE_AS_USER="+work, "HOME="+work, "TMPDIR="+work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
}

func copyExe(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// The attack: while a tree waits in the pool, something (a process a step
// with sandbox: off left behind, as docs/factory.md allows) plants a file
// and makes another unremovable. The cleaning fails when the tree is
// taken; the attempt must then not get a "fresh" checkout into a folder
// still holding what was planted.
func TestPoolUncleanableTreeIsNotCheckedOutInto(t *testing.T) {
	if os.Geteuid() != 0 {
		msg := "needs root: only root can make a file immutable (chattr +i), which no cleaning removes"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Fatal("needs chattr (apt-get install e2fsprogs)")
	}
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "u", 1), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Release(w); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	slots, _ := filepath.Glob(filepath.Join(pool.Dir(), "idle-*", "tree"))
	if len(slots) != 1 {
		t.Fatalf("pool slots: %v", slots)
	}
	stuck := filepath.Join(slots[0], "src", "stuck")
	write(t, stuck, "left by the previous step\n")
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i (this filesystem may not have the flag): %v %s", err, out)
	}
	var paths []string
	t.Cleanup(func() {
		for _, p := range paths {
			exec.Command("chattr", "-i", p).Run()
		}
	})
	paths = append(paths, stuck)
	abs := filepath.Join(state, "runs", newID(), "app")
	paths = append(paths, filepath.Join(abs, "src", "stuck"))
	w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "u", 2), abs, AddOptions{Pool: pool})
	if err == nil {
		_, serr := os.Lstat(filepath.Join(w2.Path, "src", "stuck"))
		t.Fatalf("the attempt got a tree holding what was planted in the pool (src/stuck there: %v; reuse failed: %q)", serr == nil, w2.ReuseFailed)
	}
	if !strings.Contains(err.Error(), abs) {
		t.Errorf("the error does not name the tree: %v", err)
	}
}

// The twin: a tree the pool gives that cannot be used but can be removed
// (its trusted index damaged) is removed, and the attempt gets a fresh
// checkout equal to git's.
func TestPoolUnusableTreeIsCheckedOutAfresh(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	want := freshManifest(t, dir, c1)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "f", 1), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "src", "planted.go"), "package evil\n")
	if ok, err := r.Release(w); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	idx, _ := filepath.Glob(filepath.Join(pool.Dir(), "idle-*", "index"))
	if len(idx) != 1 {
		t.Fatalf("pool indexes: %v", idx)
	}
	if err := os.WriteFile(idx[0], []byte("DIRC damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "f", 2), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if w2.Reused || w2.ReuseFailed == "" {
		t.Errorf("reused %v, reuse failed %q: want a fresh checkout saying why", w2.Reused, w2.ReuseFailed)
	}
	if got := manifest(t, w2.Path); got != want {
		t.Errorf("the fresh checkout differs from git's:\n%s\nwant:\n%s", got, want)
	}
}

// asUser65534 runs the test named test from a copy of this test binary as
// uid 65534 (whom permissions bind) with KUSAW_TEST_AS_USER set to a folder
// it owns, when the test runs as root; as another user it runs the test
// in place with that variable set.
func asUser65534(t *testing.T, test string, body func(t *testing.T)) {
	if os.Getenv("KUSAW_TEST_AS_USER") != "" || os.Getuid() != 0 {
		if os.Getenv("KUSAW_TEST_AS_USER") == "" {
			t.Setenv("KUSAW_TEST_AS_USER", t.TempDir())
		}
		body(t)
		return
	}
	dir, err := os.MkdirTemp("", "kusaw-as-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forceRemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "worktree.test")
	copyExe(t, os.Args[0], bin)
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	os.Chown(work, 65534, 65534)
	cmd := exec.Command(bin, "-test.run", "^"+test+"$", "-test.v")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "KUSAW_TEST_AS_USER="+work, "HOME="+work, "TMPDIR="+work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
}

// The attack: the step (sandboxed, whose worktree git folder is writable)
// leaves a folder without permissions in it. Release must still remove
// the registration, else it stays in the repository's .git/worktrees/
// with what the step wrote, and git worktree prune cannot remove it either.
func TestReleaseRemovesUnwritableGitFolder(t *testing.T) {
	asUser65534(t, "TestReleaseRemovesUnwritableGitFolder", func(t *testing.T) {
		isolateHome(t)
		dir, c1, _ := poolRepo(t)
		state := t.TempDir()
		r := open(t, dir)
		pool := r.Pool(state)
		tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "g", 1), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(w.GitDir, "junk", "x", "index"), "planted\n")
		os.Chmod(filepath.Join(w.GitDir, "junk", "x"), 0)
		ok, err := r.Release(w)
		if !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
		if _, err := os.Lstat(w.GitDir); err == nil {
			t.Fatalf("the worktree's git folder %s is still there", w.GitDir)
		}
		// The twin: the tree is in the pool and the next attempt takes it.
		w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "g", 2), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
		if err != nil || !w2.Reused {
			t.Fatalf("next attempt: %v (reused %v, %s)", err, w2 != nil && w2.Reused, func() string {
				if w2 != nil {
					return w2.ReuseFailed
				}
				return ""
			}())
		}
	})
}
