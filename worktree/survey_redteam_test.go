package worktree

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// More twins of the commit's survey, from the step's side (red team of
// 6567003): each change committed through the survey makes the tree git
// add --all makes of it in a plain clone: negated and all-ignoring
// patterns, a folder ignoring itself, a nested repository, a FIFO, names
// that are not UTF-8, a link retargeted, a tracked folder newly ignored.
// (A FIFO in a tracked file's place fails the commit, as git add -A
// fails: the step's own attempt only.)
func TestSurveyRedTeamTwins(t *testing.T) {
	isolateHome(t)
	dir, base := surveyRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", base)
	cases := []struct {
		name string
		do   func(root string)
	}{
		{"tracked file in an ignored folder deleted", func(root string) { os.Remove(filepath.Join(root, "vendor", "keep.txt")) }},
		{"negated pattern", func(root string) {
			write(t, filepath.Join(root, ".gitignore"), "*.log\n!keep.log\nvendor/\n")
			write(t, filepath.Join(root, "keep.log"), "k\n")
			write(t, filepath.Join(root, "other.log"), "secret\n")
		}},
		{"ignore everything", func(root string) {
			write(t, filepath.Join(root, ".gitignore"), "*\n")
			write(t, filepath.Join(root, "src", "a.go"), "package a // changed\n")
			write(t, filepath.Join(root, "new.txt"), "secret\n")
		}},
		{"untracked folder ignoring itself", func(root string) {
			write(t, filepath.Join(root, "new", ".gitignore"), "*\n")
			write(t, filepath.Join(root, "new", "secret.txt"), "secret\n")
		}},
		{"nested repository", func(root string) {
			sub := filepath.Join(root, "sub")
			os.MkdirAll(sub, 0o755)
			tgit(t, sub, "init", "-q")
			write(t, filepath.Join(sub, "x.txt"), "x\n")
			tgit(t, sub, "add", "x.txt")
			tgit(t, sub, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
		}},
		{"untracked FIFO", func(root string) { syscall.Mkfifo(filepath.Join(root, "src", "pipe"), 0o644) }},
		{"not UTF-8 names", func(root string) {
			write(t, filepath.Join(root, "x\xff.txt"), "x\n")
			write(t, filepath.Join(root, "y\xfe.log"), "secret\n")
		}},
		{"link retargeted", func(root string) {
			os.Remove(filepath.Join(root, "link"))
			os.Symlink("/etc/passwd", filepath.Join(root, "link"))
		}},
		{"ignored file in a tracked folder made by a pattern with a slash", func(root string) {
			write(t, filepath.Join(root, ".gitignore"), "*.log\nvendor/\nsrc/deep/\n")
			write(t, filepath.Join(root, "src", "deep", "new.txt"), "secret\n")
			write(t, filepath.Join(root, "src", "deep", "b.go"), "package deep // changed\n")
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "rt", i+1), filepath.Join(state, "runs", fmt.Sprint(i), "app"), AddOptions{Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			ref := refClone(t, dir, base)
			c.do(w.Path)
			c.do(ref)
			_, aerr := tgitErr(ref, "add", "-A")
			want, _ := tgitErr(ref, "write-tree")
			full := fullAdds.Load()
			sha, _, err := w.CommitAll("m")
			if err != nil {
				t.Fatalf("commit: %v (git add -A in the clone: %v)", err, aerr)
			}
			if got := tgit(t, dir, "rev-parse", sha+"^{tree}"); got+"\n" != want && got != want {
				diff, _ := tgitErr(dir, "diff", "--name-status", want[:len(want)-1], got)
				t.Errorf("committed tree %s, git add --all makes %s (add: %v; full pass: %v):\n%s", got, want, aerr, fullAdds.Load() != full, diff)
			}
			if ok, err := r.Release(w); err != nil {
				t.Fatalf("release: %v %v", ok, err)
			}
		})
	}
}
