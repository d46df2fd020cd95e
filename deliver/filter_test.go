package deliver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
)

// The run branch's tree is a sandboxed step's: its .gitattributes must not
// pick which of the user's filter drivers kusaw's checkout on the host runs
// (with git-lfs installed globally, filter=lfs plus a step's .lfsconfig
// would fetch from a URL the step chose). The user's global config here
// defines two drivers, as `git lfs install` does; each leaves a marker when
// it runs.
func TestDeliverRunsNoFilterTheStepSelects(t *testing.T) {
	for _, tc := range []struct {
		name, how  string
		checkedOut bool
	}{
		{"ff-only into the checkout", HowFFOnly, true},
		{"merge in a temporary worktree", HowMerge, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := repo(t, ".gitattributes", "*.txt filter=evil\n*.bin filter=lfs\n")
			addToRunBranch(t, dir, map[string]string{"work.txt": "step text\n", "blob.bin": "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n"})
			if !tc.checkedOut {
				diverge(t, dir, "other.txt", "other\n")
			}
			marks := t.TempDir()
			global := filepath.Join(t.TempDir(), "gitconfig")
			cfg := ""
			for _, d := range []string{"evil", "lfs"} {
				cfg += fmt.Sprintf("[filter %q]\n\tsmudge = touch '%s/%s-smudge' && cat\n\tclean = touch '%s/%s-clean' && cat\n\trequired = true\n", d, marks, d, marks, d)
			}
			if err := os.WriteFile(global, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("GIT_CONFIG_GLOBAL", global)

			p := plan(dir)
			p.Merge = &Merge{Into: "main", How: tc.how}
			if _, err := Run(context.Background(), p, nil); err != nil {
				t.Fatalf("delivery failed: %v", err)
			}
			if ran, _ := os.ReadDir(marks); len(ran) != 0 {
				t.Fatalf("deliver ran filter drivers the step's .gitattributes selected: %v", ran)
			}
			// The twin: the work is delivered, files as the blobs hold them.
			if got := testkit.GitRun(t, dir, "show", "main:work.txt"); got != "step text" {
				t.Fatalf("main:work.txt = %q", got)
			}
			if tc.checkedOut {
				if b, err := os.ReadFile(filepath.Join(dir, "work.txt")); err != nil || string(b) != "step text\n" {
					t.Fatalf("the checkout's work.txt = %q, %v", b, err)
				}
			}
		})
	}
}

// addToRunBranch commits files on kusaw/r1.
func addToRunBranch(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	wt := filepath.Join(t.TempDir(), "wt")
	testkit.GitRun(t, dir, "worktree", "add", "-q", wt, "kusaw/r1")
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(wt, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testkit.GitRun(t, wt, "add", ".")
	testkit.GitRun(t, wt, "commit", "-qm", "more run work")
	testkit.GitRun(t, dir, "worktree", "remove", "--force", wt)
}
