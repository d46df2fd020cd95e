package factory

import (
	"context"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// TestFollowUpContinuesTheRunBranch: a follow-up run starts from the head
// of the run it continues, not from the repo's base, and delivers under
// the chain's first run (the same pushed branch and pull request).
func TestFollowUpContinuesTheRunBranch(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: app}
pipelines:
  default: [edit]
steps:
  edit: {run: [sh, -c, "echo $KUSAW_PARAM_TASK >> notes.txt"]}
`, "app")
	e, err := New(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	first, err := e.PrepareRequest(RunRequest{Pipeline: "default", Params: map[string]string{"TASK": "one"}})
	if err != nil {
		t.Fatal(err)
	}
	e.Execute(context.Background(), first)
	if first.Record.State != status.RunSucceeded {
		t.Fatalf("first run: %s %s", first.Record.State, first.Record.Message)
	}
	head1 := first.Record.Repos[0].HeadSHA

	if _, err := e.PrepareRequest(RunRequest{Pipeline: "default", Continues: "no-such-run"}); err == nil {
		t.Fatal("a follow-up of a run that does not exist was prepared")
	}
	tr := &record.Trigger{Name: "revise", Forge: "github", Event: "pull_request_review.submitted", PullRequest: 7}
	second, err := e.PrepareRequest(RunRequest{Pipeline: "default", Params: map[string]string{"TASK": "two"}, Trigger: tr, Continues: first.Record.ID})
	if err != nil {
		t.Fatal(err)
	}
	e.Execute(context.Background(), second)
	rec := second.Record
	if rec.State != status.RunSucceeded {
		t.Fatalf("follow-up: %s %s", rec.State, rec.Message)
	}
	if rec.Repos[0].BaseSHA != head1 {
		t.Fatalf("the follow-up started from %s, not the first run's head %s", rec.Repos[0].BaseSHA, head1)
	}
	if rec.Continues != first.Record.ID || rec.Thread != first.Record.ID || threadID(rec) != first.Record.ID {
		t.Fatalf("continues %q thread %q", rec.Continues, rec.Thread)
	}
	if got := testkit.GitRun(t, f.Repos["app"].Path, "show", rec.Repos[0].Branch+":notes.txt"); got != "one\ntwo" {
		t.Fatalf("notes.txt on the follow-up's branch = %q, want both runs' lines", got)
	}
	saved, err := e.State.LoadRun(rec.ID)
	if err != nil || saved.Trigger == nil || saved.Trigger.PullRequest != 7 {
		t.Fatalf("run.json's trigger = %+v (%v)", saved.Trigger, err)
	}
}
