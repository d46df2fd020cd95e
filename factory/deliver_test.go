package factory

import (
	"context"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// TestPullBodySummary: the default pull request body names the steps, what
// the agents used and cost, and the run branch's diffstat.
func TestPullBodySummary(t *testing.T) {
	f := testkit.Factory(t, "version: 1\nrepos:\n  app: {path: app}\npipelines:\n  default: [a]\nsteps:\n  a: {run: [true]}\n", "app")
	repo := f.Repos["app"].Path
	base := testkit.GitRun(t, repo, "rev-parse", "HEAD")
	testkit.GitRun(t, repo, "checkout", "-q", "-b", "kusaw/r1")
	testkit.GitRun(t, repo, "commit", "-q", "--allow-empty", "-m", "nothing")
	testkit.GitRun(t, repo, "mv", "README", "README.md")
	testkit.GitRun(t, repo, "commit", "-q", "-m", "rename")
	cost := 0.125
	rec := &record.RunRecord{ID: "r1", Pipeline: "default",
		Steps: []record.StepResult{{ID: "a", Outcome: status.OutcomePassed, Attempts: 2}},
		Usage: &record.Usage{InputTokens: 1000, OutputTokens: 200, CostUSD: &cost, Turns: 3}}
	body, err := (&Engine{}).pullBody(context.Background(), rec, &record.RunRepo{Path: repo, BaseSHA: base, Branch: "kusaw/r1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| a | passed | 2 |", "Agents used 1200 tokens, $0.1250 in 3 turns.", "README"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
}
