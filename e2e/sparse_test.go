package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repos.NAME.sparse from the step's side, in its sandbox: the worktree
// holds the cone only, and what the step writes, deletes or commits
// outside it is not in the attempt's commit; twin: its edits inside the
// cone are committed exactly.
func TestSparseRepoKeepsOutsideTheCone(t *testing.T) {
	need(t, "bwrap")
	step := `set -eu
test ! -e lib/util.go && test -f services/api/main.go && test -f services/README
echo changed > services/api/main.go
echo new > services/api/new.go
mkdir -p lib && echo forged > lib/util.go
mkdir -p other && echo planted > other/x
git update-index --force-remove docs/guide.md
git -c user.name=s -c user.email=s@s commit -q -m own --no-verify
`
	dir := factoryDir(t, `version: 1
repos:
  app: {path: app, sparse: [services/api]}
pipelines:
  default: [edit]
steps:
  edit:
    sandbox: required
    run:
      - sh
      - -c
      - |
`+indent(step, "        ")+`
`, "app")
	repo := filepath.Join(dir, "app")
	for _, f := range []string{"services/api/main.go", "services/README", "lib/util.go", "docs/guide.md"} {
		writeFile(t, filepath.Join(repo, f), f+"\n")
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "tree")
	base := strings.TrimSpace(git(t, repo, "rev-parse", "HEAD"))
	r := runKusaw(t, dir, "run")
	if r.code != 0 {
		lr := runKusaw(t, dir, "logs", onlyRun(t, dir), "--step", "edit")
		t.Fatalf("kusaw run: %d\n%s%s\n%s%s", r.code, r.stdout, r.stderr, lr.stdout, lr.stderr)
	}
	id := onlyRun(t, dir)
	diff := strings.Fields(git(t, repo, "diff", "--name-status", "--no-renames", base, "kusaw/"+id))
	want := []string{"M", "services/api/main.go", "A", "services/api/new.go"}
	// The attack was made: the step's own commit deleted a file outside.
	if own := git(t, repo, "log", "--format=%s", "--name-status", "kusaw/attempts/"+id+"/edit/1"); !strings.Contains(own, "own\n\nD\tdocs/guide.md") {
		t.Fatalf("the step's own commit is not on its branch:\n%s", own)
	}
	if !slices.Equal(diff, want) {
		t.Fatalf("the run's commit changed %q, want exactly %q", diff, want)
	}
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = by + lines[i]
	}
	return strings.Join(lines, "\n")
}
