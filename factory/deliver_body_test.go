package factory

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
)

// The pull request's default body holds the run branch's diffstat, made by
// git on the host over a step's commit: the step's .gitattributes must not
// make it run a textconv of the user's config (here one that leaves a
// marker). The twin: the diffstat is in the body.
func TestPullBodyRunsNoTextconvTheStepSelects(t *testing.T) {
	testkit.NeedGit(t)
	repo := t.TempDir()
	testkit.GitRun(t, repo, "init", "-q", "-b", "main")
	testkit.GitRun(t, repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "base")
	base := testkit.GitRun(t, repo, "rev-parse", "HEAD")
	testkit.GitRun(t, repo, "checkout", "-q", "-b", "kusaw/r1")
	os.WriteFile(filepath.Join(repo, ".gitattributes"), []byte("* diff=evil\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "work.txt"), []byte("one\ntwo\n"), 0o644)
	testkit.GitRun(t, repo, "add", ".")
	testkit.GitRun(t, repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "step")

	marks := t.TempDir()
	global := filepath.Join(t.TempDir(), "gitconfig")
	os.WriteFile(global, []byte("[diff \"evil\"]\n\ttextconv = touch '"+marks+"/textconv' && cat\n"), 0o644)
	t.Setenv("GIT_CONFIG_GLOBAL", global)

	rec := &record.RunRecord{ID: "r1", Pipeline: "default"}
	body, err := (&Engine{}).pullBody(context.Background(), rec, &record.RunRepo{Name: "app", Path: repo, Branch: "kusaw/r1", BaseSHA: base}, "")
	if err != nil {
		t.Fatal(err)
	}
	if ran, _ := os.ReadDir(marks); len(ran) != 0 {
		t.Fatalf("the diffstat ran a textconv the step's .gitattributes selected: %v", ran)
	}
	if !strings.Contains(body, "work.txt") || !strings.Contains(body, "2 files changed") {
		t.Fatalf("body lacks the diffstat:\n%s", body)
	}
}
