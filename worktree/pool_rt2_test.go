package worktree

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// More of the step's attacks on a reused tree (rt2, against 6567003: no
// git status after the cleaning, Release applying the commit's survey).
func init() {
	poolAttacks = append(poolAttacks, []poolAttack{
		{"default ACL on a tracked folder", func(t *testing.T, wt, _ string) {
			// user::rwx group::rwx other::rwx: what git checks out into
			// the folder would be world-writable.
			acl := binary.LittleEndian.AppendUint32(nil, 2)
			for _, tag := range []uint16{0x01, 0x04, 0x20} {
				acl = binary.LittleEndian.AppendUint16(acl, tag)
				acl = binary.LittleEndian.AppendUint16(acl, 7)
				acl = binary.LittleEndian.AppendUint32(acl, 0xffffffff)
			}
			if err := unix.Lsetxattr(filepath.Join(wt, "src"), "system.posix_acl_default", acl, 0); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("the temp folder takes no ACLs (%v): point TMPDIR at a filesystem that does (ext4, xfs, btrfs)", err)
				}
				t.Skipf("the temp folder takes no ACLs (%v): point TMPDIR at a filesystem that does (ext4, xfs, btrfs) to run this attack", err)
			}
			os.Remove(filepath.Join(wt, "src", "a.go")) // checked out again into it
		}},
		{"hard link from outside the tree", func(t *testing.T, wt, _ string) {
			if err := os.Link(filepath.Join(wt, "README"), filepath.Join(t.TempDir(), "kept")); err != nil {
				t.Fatal(err)
			}
		}},
		{"case-only rename", func(t *testing.T, wt, _ string) {
			os.Rename(filepath.Join(wt, "README"), filepath.Join(wt, "readme"))
		}},
		{"tracked file replaced by a folder", func(t *testing.T, wt, _ string) {
			os.Remove(filepath.Join(wt, "README"))
			write(t, filepath.Join(wt, "README", "x.log"), "secret\n")
		}},
		{"nested git folder in a tracked folder", func(t *testing.T, wt, _ string) {
			write(t, filepath.Join(wt, "src", ".git", "HEAD"), "ref: refs/heads/main\n")
			write(t, filepath.Join(wt, "src", ".git", "config"), "[core]\n\tfsmonitor = touch /tmp/kusaw-pwned\n")
			os.MkdirAll(filepath.Join(wt, "src", ".git", "objects"), 0o755)
			os.MkdirAll(filepath.Join(wt, "src", ".git", "refs"), 0o755)
		}},
		{"untracked nested repository", func(t *testing.T, wt, _ string) {
			n := filepath.Join(wt, "nested")
			os.MkdirAll(n, 0o755)
			tgit(t, n, "init", "-q")
			write(t, filepath.Join(n, "f"), "f\n")
			tgit(t, n, "add", "f")
			tgit(t, n, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "x")
		}},
		{"empty folders", func(t *testing.T, wt, _ string) {
			os.MkdirAll(filepath.Join(wt, "empty", "deeper"), 0o755)
			os.MkdirAll(filepath.Join(wt, "src", "deep", "empty"), 0o700)
		}},
		{"ignored files in an untracked folder", func(t *testing.T, wt, _ string) {
			write(t, filepath.Join(wt, "build", "out.log"), "secret\n")
			write(t, filepath.Join(wt, "build", "deep", "more.log"), "secret\n")
		}},
		{"pathspec magic and dashes", func(t *testing.T, wt, _ string) {
			for _, n := range []string{":(glob)*", ":(exclude)src", "--all", "back\\slash", "*"} {
				write(t, filepath.Join(wt, n), "x\n")
				write(t, filepath.Join(wt, "src", n), "x\n")
			}
		}},
		{"more than 500 paths", func(t *testing.T, wt, _ string) {
			for i := range maxSurveyed + 5 {
				write(t, filepath.Join(wt, "src", fmt.Sprintf("f%d.log", i)), "secret\n")
				write(t, filepath.Join(wt, fmt.Sprintf("f%d", i)), "x\n")
			}
		}},
	}...)
}

// A tree reused on an unchanged base keeps the index of its last
// checkout as it was, mtime included (copyIndex must: git tells racily
// clean entries by it; unracy stamps it once), so after a week of such
// reuse the held index of a tree in use carries a week-old mtime. The
// sweep of what a crashed kusaw left must not take it for one: Release
// (its own, or another attempt's) would remove the index of a running
// attempt, and its tree would be thrown away instead of pooled.
func TestSweepKeepsTheHeldIndexOfATreeInUse(t *testing.T) {
	isolateHome(t)
	dir, c1, _ := poolRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	add := func(n int) *Worktree {
		t.Helper()
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", n), filepath.Join(state, "runs", string(rune('a'+n)), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w, other := add(1), add(2)
	week := time.Now().Add(-8 * 24 * time.Hour)
	if err := os.Chtimes(w.index, week, week); err != nil { // the checkout's time, 8 days ago
		t.Fatal(err)
	}
	if ok, err := r.Release(other); !ok || err != nil {
		t.Fatalf("release of the other attempt: %v %v", ok, err)
	}
	if _, err := os.Stat(w.index); err != nil {
		t.Fatalf("another attempt's release swept the held index of a tree in use: %v", err)
	}
	if ok, err := r.Release(w); !ok || err != nil {
		t.Errorf("the tree in use does not go back to the pool: %v %v", ok, err)
	}
}

// The twin: a held index no attempt has touched for longer than a week
// (what a crashed kusaw left) still goes.
func TestSweepRemovesAbandonedHeldIndexes(t *testing.T) {
	p := &Pool{dir: t.TempDir(), max: PoolIdleMax}
	held, err := p.newHeld()
	if err != nil {
		t.Fatal(err)
	}
	write(t, held, "DIRC")
	p.sweepAt(time.Now().Add(heldMaxAge - time.Hour))
	if _, err := os.Stat(held); err != nil {
		t.Fatalf("a held index younger than %v went: %v", heldMaxAge, err)
	}
	p.sweepAt(time.Now().Add(heldMaxAge + time.Hour))
	if _, err := os.Stat(held); err == nil {
		t.Errorf("a held index older than %v stays", heldMaxAge)
	}
}

// The attack, with kusaw running as the step's own user: the step changes
// files and then takes its folders' read or search permission away. git
// skips a folder it cannot open with a warning and exits 0, so the commit
// made of the survey's fallback (or git add --all of an untracked folder)
// silently lost what was in it, and the attempt said "no change". The
// commit must hold what git add -A makes of the same changes with the
// folders readable; its twin, a folder left readable but not writable,
// always did.
func TestCommitReadsFoldersTheStepMadeUnreadable(t *testing.T) {
	asUser65534(t, "TestCommitReadsFoldersTheStepMadeUnreadable", func(t *testing.T) {
		isolateHome(t)
		dir, c1, _ := poolRepo(t)
		state := t.TempDir()
		r := open(t, dir)
		pool := r.Pool(state)
		tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
		change := func(root string) {
			write(t, filepath.Join(root, "src", "a.go"), "package changed\n")
			write(t, filepath.Join(root, "src", "new.go"), "package new\n")
			write(t, filepath.Join(root, "src", "deep", "b.go"), "package deeper\n")
			write(t, filepath.Join(root, "fresh", "sub", "c.go"), "package c\n")
		}
		cases := []struct {
			name  string
			modes map[string]os.FileMode
		}{
			{"readable, not writable", map[string]os.FileMode{"src": 0o555, "fresh/sub": 0o555}},
			{"no permissions", map[string]os.FileMode{"src/deep": 0, "src": 0, "fresh/sub": 0}},
			{"search only", map[string]os.FileMode{"src": 0o311, "fresh": 0o311}},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", i+1), filepath.Join(state, "runs", string(rune('a'+i)), "app"), AddOptions{Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				ref := refClone(t, dir, c1)
				change(ref)
				tgit(t, ref, "add", "-A")
				want := tgit(t, ref, "write-tree")
				change(w.Path)
				for _, p := range []string{"src/deep", "src", "fresh/sub", "fresh"} { // deepest first
					if m, ok := c.modes[p]; ok {
						os.Chmod(filepath.Join(w.Path, p), m)
					}
				}
				sha, changed, err := w.CommitAll("m")
				if err != nil {
					t.Fatal(err)
				}
				if got := tgit(t, dir, "rev-parse", sha+"^{tree}"); got != want || !changed {
					diff, _ := tgitErr(dir, "diff", "--name-status", want, got)
					t.Errorf("changed %v; committed tree %s, git add -A of the readable tree makes %s:\n%s", changed, got, want, diff)
				}
				if ok, err := r.Release(w); !ok || err != nil {
					t.Fatalf("release: %v %v", ok, err)
				}
			})
		}
	})
}
