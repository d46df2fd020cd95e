package worktree

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// surveyRepo is poolRepo's first commit with a folder the repository
// ignores that still has a tracked file (added with -f).
func surveyRepo(t *testing.T) (dir, base string) {
	t.Helper()
	dir, c1, _ := poolRepo(t)
	tgit(t, dir, "checkout", "-q", c1)
	write(t, filepath.Join(dir, ".gitignore"), "*.log\nvendor/\n")
	write(t, filepath.Join(dir, "vendor", "keep.txt"), "kept\n")
	tgit(t, dir, "add", "-f", ".gitignore", "vendor/keep.txt")
	tgit(t, dir, "commit", "-q", "-m", "vendor")
	return dir, tgit(t, dir, "rev-parse", "HEAD")
}

// The twins of the commit's survey: what a step did, committed from what
// kusaw's own walk of the tree found (git reads only those paths), makes
// the very tree git add --all makes of the same changes in a plain clone,
// and nothing ignored is committed.
func TestCommitOfSurveyedChangesIsGitAddAll(t *testing.T) {
	isolateHome(t)
	dir, base := surveyRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", base)
	link := func(target, p string) { os.RemoveAll(p); os.Symlink(target, p) }
	cases := []struct {
		name string
		full bool // git add --all decides instead (too many paths)
		do   func(root string)
	}{
		{"nothing", false, func(string) {}},
		{"ignored files", false, func(root string) {
			write(t, filepath.Join(root, "debug.log"), "secret\n")
			write(t, filepath.Join(root, "src", "deep", "x.log"), "secret\n")
		}},
		{"untracked folder with ignored files in it", false, func(root string) {
			write(t, filepath.Join(root, "new", "a.txt"), "a\n")
			write(t, filepath.Join(root, "new", "b.log"), "secret\n")
			write(t, filepath.Join(root, "new", "deep", "c.log"), "secret\n")
			write(t, filepath.Join(root, "new", "deep", "d.txt"), "d\n")
		}},
		{"ignored folder", false, func(root string) {
			write(t, filepath.Join(root, "src", "vendor", "lib.go"), "secret\n")
			write(t, filepath.Join(root, "vendor", "new.txt"), "secret\n")
			write(t, filepath.Join(root, "vendor", "keep.txt"), "changed\n")
		}},
		{"an ignore file the step changed", false, func(root string) {
			write(t, filepath.Join(root, ".gitignore"), "vendor/\nsecret.txt\n")
			write(t, filepath.Join(root, "secret.txt"), "secret\n")
			write(t, filepath.Join(root, "debug.log"), "now committed\n")
		}},
		{"an ignore file of its own", false, func(root string) {
			write(t, filepath.Join(root, "src", ".gitignore"), "*.tmp\n")
			write(t, filepath.Join(root, "src", "a.tmp"), "secret\n")
			write(t, filepath.Join(root, "src", "b.txt"), "b\n")
		}},
		{"ignore file removed", false, func(root string) {
			os.Remove(filepath.Join(root, ".gitignore"))
			write(t, filepath.Join(root, "debug.log"), "now committed\n")
			write(t, filepath.Join(root, "vendor", "new.txt"), "now committed\n")
		}},
		{"file to folder", false, func(root string) {
			os.Remove(filepath.Join(root, "README"))
			write(t, filepath.Join(root, "README", "x.txt"), "x\n")
			write(t, filepath.Join(root, "README", "y.log"), "secret\n")
		}},
		{"folder to file", false, func(root string) {
			os.RemoveAll(filepath.Join(root, "src", "deep"))
			write(t, filepath.Join(root, "src", "deep"), "a file now\n")
		}},
		{"folder to ignored file", false, func(root string) {
			os.RemoveAll(filepath.Join(root, "src", "deep"))
			write(t, filepath.Join(root, "src", "deep.log"), "secret\n")
		}},
		{"folder to link", false, func(root string) { link("../bin", filepath.Join(root, "src", "deep")) }},
		{"file to link and link to file", false, func(root string) {
			link("README", filepath.Join(root, "gone.txt"))
			os.Remove(filepath.Join(root, "link"))
			write(t, filepath.Join(root, "link"), "a file now\n")
		}},
		{"deleted folder", false, func(root string) { os.RemoveAll(filepath.Join(root, "src")) }},
		{"modes", false, func(root string) {
			os.Chmod(filepath.Join(root, "README"), 0o755)
			os.Chmod(filepath.Join(root, "bin", "run.sh"), 0o644)
		}},
		{"odd names", false, func(root string) {
			for _, n := range []string{":(glob)*", "-n", "a\nb", "sp ace", "*", "back\\slash"} {
				write(t, filepath.Join(root, "odd", n), n+"\n")
				write(t, filepath.Join(root, n), n+"\n")
			}
		}},
		{"empty folders", false, func(root string) {
			os.MkdirAll(filepath.Join(root, "empty", "deeper"), 0o755)
		}},
		{"many files", true, func(root string) {
			for i := range maxSurveyed + 10 {
				write(t, filepath.Join(root, fmt.Sprintf("f%d.txt", i)), fmt.Sprint(i))
				if i%50 == 0 {
					write(t, filepath.Join(root, fmt.Sprintf("f%d.log", i)), "secret\n")
				}
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", i+1), filepath.Join(state, "runs", fmt.Sprint(i), "app"), AddOptions{Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			ref := refClone(t, dir, base)
			c.do(w.Path)
			c.do(ref)
			tgit(t, ref, "add", "-A")
			want := tgit(t, ref, "write-tree")
			full := fullAdds.Load()
			sha, changed, err := w.CommitAll("m")
			if err != nil {
				t.Fatal(err)
			}
			if got := tgit(t, dir, "rev-parse", sha+"^{tree}"); got != want {
				diff, _ := tgitErr(dir, "diff", "--name-status", want, got)
				t.Errorf("committed tree %s, git add --all makes %s:\n%s", got, want, diff)
			}
			if changed != (c.name != "nothing" && c.name != "empty folders" && c.name != "ignored files") {
				t.Errorf("changed = %v", changed)
			}
			if files := tgit(t, dir, "ls-tree", "-r", "--name-only", sha); strings.Contains(files, ".log") || strings.Contains(files, "secret") || strings.Contains(files, "vendor/new") || strings.Contains(files, "a.tmp") {
				if c.name != "an ignore file the step changed" && c.name != "ignore file removed" {
					t.Errorf("an ignored file was committed:\n%s", files)
				}
			}
			if took := fullAdds.Load() != full; took != c.full {
				t.Errorf("git add --all ran: %v, want %v", took, c.full)
			}
			if ok, err := r.Release(w); !ok || err != nil {
				t.Fatalf("release: %v %v", ok, err)
			}
		})
	}
}

// Release removes what the commit's survey found without walking the tree
// again, so what changed the tree since (a process an unsandboxed step
// left) must not turn a removal into one beyond a link: a folder above a
// path to remove that is now a link to the host stops it, and the
// listing-level cleaning takes over.
func TestReleaseAfterTheSurveyRemovesNothingBeyondALink(t *testing.T) {
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
	write(t, filepath.Join(w.Path, "src", "deep", "left.log"), "left\n")
	if _, _, err := w.CommitAll("m"); err != nil {
		t.Fatal(err)
	}
	if w.survey == nil || len(w.survey.remove) == 0 {
		t.Fatalf("the survey found nothing to remove: %+v", w.survey)
	}
	host := t.TempDir()
	write(t, filepath.Join(host, "left.log"), "the user's\n")
	os.RemoveAll(filepath.Join(w.Path, "src", "deep"))
	if err := os.Symlink(host, filepath.Join(w.Path, "src", "deep")); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Release(w); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if _, err := os.Stat(filepath.Join(host, "left.log")); err != nil {
		t.Errorf("Release removed a file beyond a link: %v", err)
	}
	assertPoolHoldsNoLeftover(t, pool, want)
	w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 2), filepath.Join(state, "2", "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if got := manifest(t, w2.Path); !w2.Reused || got != want {
		t.Errorf("reused %v (%s); the tree:\n%s\nwant:\n%s", w2.Reused, w2.ReuseFailed, got, want)
	}
}

// What changes the tree after the commit's survey (a process an
// unsandboxed step left running) is not in the survey Release applies;
// the full cleaning when the tree is taken again removes it all the same.
func TestChangesAfterTheSurveyAreCleanedAtTake(t *testing.T) {
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
	if _, _, err := w.CommitAll("m"); err != nil || w.survey == nil {
		t.Fatalf("commit: %v, survey %v", err, w.survey)
	}
	write(t, filepath.Join(w.Path, "src", "late.log"), "secret\n")
	p := filepath.Join(w.Path, "src", "a.go")
	fi, _ := os.Stat(p)
	os.WriteFile(p, []byte("package b\n"), 0o644)
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	os.Chmod(filepath.Join(w.Path, "bin"), 0o777)
	if ok, err := r.Release(w); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 2), filepath.Join(state, "2", "app"), AddOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if !w2.Reused || w2.Cleaned.Untracked == 0 || w2.Cleaned.Changed == 0 || w2.Cleaned.Folders == 0 {
		t.Errorf("reused %v (%s), cleaned %+v", w2.Reused, w2.ReuseFailed, w2.Cleaned)
	}
	if got := manifest(t, w2.Path); got != want {
		t.Errorf("the reused tree differs from a fresh checkout:\n%s\nwant:\n%s", got, want)
	}
}
