package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// A step's commit picks, with its .gitattributes, which files the user's
// filter drivers (git lfs install defines lfs globally) apply to, and
// kusaw's git runs on the host: clean when it commits the attempt, smudge
// when it checks out the next attempt's worktree. A driver the repository
// does not use must not run; one its own .gitattributes names still does.
func TestWorktreeRunsNoFilterTheStepSelects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		repoUse bool // the repository's own .gitattributes names the driver
	}{{"driver the repo does not use", false}, {"driver the repo uses", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shapeFactory(t, "  default: [plant, next]\n", `  plant:
    run: [sh, -c, 'printf "*.txt filter=evil\n" >> .gitattributes && echo hi > planted.txt']
  next:
    run: [sh, -c, 'test "$(cat planted.txt)" = hi']
`)
			marks := t.TempDir()
			writeFile(t, filepath.Join(dir, "home", ".gitconfig"), "[filter \"evil\"]\n\tsmudge = touch '"+marks+"/smudge' && cat\n\tclean = touch '"+marks+"/clean' && cat\n")
			if tc.repoUse {
				app := filepath.Join(dir, "app")
				writeFile(t, filepath.Join(app, ".gitattributes"), "*.dat filter=evil\n")
				git(t, app, "add", ".gitattributes")
				git(t, app, "commit", "-q", "-m", "attributes")
			}
			res := runKusaw(t, dir, "run")
			if res.code != 0 {
				t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			ran, _ := os.ReadDir(marks)
			if !tc.repoUse && len(ran) != 0 {
				t.Fatalf("kusaw's git on the host ran filter drivers a step's .gitattributes selected: %v", ran)
			}
			if tc.repoUse && len(ran) != 2 {
				t.Fatalf("the repository's own filter driver did not run on its files: %v", ran)
			}
			verifyRecords(t, os.Geteuid(), dir)
		})
	}
}
