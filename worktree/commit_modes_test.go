package worktree

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestCommitReadsFoldersTheStepMadeUnreadable's attack on git add --all,
// the commit's way for a step's own commits and for more than
// maxSurveyed paths: as the step's own user git skips a folder it
// cannot open (warning, exit 0), so what the step wrote in it was lost;
// and a tracked file the step made unreadable failed the whole commit,
// survey or not. The commit must hold what git add -A makes of the same
// changes with everything readable; the twins (folders readable, not
// writable) always did.
func TestFullCommitReadsWhatTheStepMadeUnreadable(t *testing.T) {
	asUser65534(t, "TestFullCommitReadsWhatTheStepMadeUnreadable", func(t *testing.T) {
		isolateHome(t)
		dir, c1, _ := poolRepo(t)
		state := t.TempDir()
		r := open(t, dir)
		pool := r.Pool(state)
		tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
		change := func(root string, many bool) {
			write(t, filepath.Join(root, "src", "a.go"), "package changed\n")
			write(t, filepath.Join(root, "src", "new.go"), "package new\n")
			write(t, filepath.Join(root, "src", "deep", "b.go"), "package deeper\n")
			write(t, filepath.Join(root, "fresh", "sub", "c.go"), "package c\n")
			if many {
				for i := range maxSurveyed + 5 {
					write(t, filepath.Join(root, "src", fmt.Sprintf("many%d.go", i)), "package many\n")
				}
			}
		}
		none := map[string]os.FileMode{"src/deep": 0, "src": 0, "fresh/sub": 0}
		twin := map[string]os.FileMode{"src/deep": 0o555, "src": 0o555, "fresh/sub": 0o555}
		cases := []struct {
			name            string
			ownCommit, many bool
			modes           map[string]os.FileMode
			full            bool // git add --all's way (the survey's git add fails on an unreadable file)
		}{
			{"own commit, folders readable, not writable", true, false, twin, true},
			{"own commit, folders without permissions", true, false, none, true},
			{"more than 500 paths, folders readable, not writable", false, true, twin, true},
			{"more than 500 paths, folders without permissions", false, true, none, true},
			{"tracked files without permissions", false, false, map[string]os.FileMode{"src/a.go": 0, "README": 0}, true},
			{"own commit, tracked files without permissions", true, false, map[string]os.FileMode{"src/a.go": 0, "README": 0}, true},
			{"more than 500 paths, tracked files and folders without permissions", false, true, map[string]os.FileMode{"src/a.go": 0, "README": 0, "src/deep": 0, "src": 0}, true},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "m", i+1), filepath.Join(state, "runs", string(rune('a'+i)), "app"), AddOptions{Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				ref := refClone(t, dir, c1)
				write(t, filepath.Join(ref, "committed.go"), "package own\n")
				change(ref, c.many)
				tgit(t, ref, "add", "-A")
				want := tgit(t, ref, "write-tree")
				write(t, filepath.Join(w.Path, "committed.go"), "package own\n")
				if c.ownCommit {
					tgit(t, w.Path, "add", "-A")
					tgit(t, w.Path, "-c", "user.name=Step", "-c", "user.email=step@example.test", "commit", "-q", "-m", "the step's own")
				}
				change(w.Path, c.many)
				for _, p := range []string{"src/a.go", "README", "src/deep", "src", "fresh/sub"} { // deepest first
					if m, ok := c.modes[p]; ok {
						if err := os.Chmod(filepath.Join(w.Path, p), m); err != nil {
							t.Fatal(err)
						}
					}
				}
				full := fullAdds.Load()
				sha, changed, err := w.CommitAll("m")
				if err != nil {
					t.Fatal(err)
				}
				if took := fullAdds.Load() != full; took != c.full {
					t.Errorf("git add --all's way: %v, want %v", took, c.full)
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
