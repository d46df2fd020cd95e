package serve

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/kusaw/kusaw/status"
)

// TestIntakeReplayUnderNewDeliveryID: the signature covers the body, not
// the X-GitHub-Delivery header. An attacker who has seen one signed
// delivery (a proxy's log, the forge's delivery page) sends the same bytes
// again with a fresh delivery id, and again with another event header: no
// second run starts. The twin: a different delivery (another issue) still
// starts its run.
func TestIntakeReplayUnderNewDeliveryID(t *testing.T) {
	ff := newFakeForge(t)
	s, c, _ := intakeServer(t, ff, "", ServeOptions{})
	ev := labeled(11, "kusaw", "Say hi", "in notes.txt", "alice")
	st, out := sendHook(t, s, "issues", "", hookSecret, ev)
	waitRun(t, c, runID(t, st, out), 30*time.Second)
	for _, kind := range []string{"issues", "issue_comment", "pull_request_review"} {
		if st, out := sendHook(t, s, kind, "", hookSecret, ev); st != http.StatusOK || out["result"] != "duplicate" {
			t.Errorf("the same signed body as %s under a new delivery id: %d %v, want 200 duplicate", kind, st, out)
		}
	}
	if n := countRuns(t, s); n != 1 {
		t.Fatalf("%d runs after replays of one delivery, want 1", n)
	}
	st, out = sendHook(t, s, "issues", "", hookSecret, labeled(12, "kusaw", "Say hi", "in notes.txt", "alice"))
	waitRun(t, c, runID(t, st, out), 30*time.Second)
	if n := countRuns(t, s); n != 2 {
		t.Fatalf("%d runs, want 2: another issue's delivery must start its run", n)
	}
	// The restart keeps the bodies seen too.
	if fresh, _ := newIntake(s.F.StateDir, nil).firstTime("github", "another-id", bodyKey(mustJSON(t, ev))); fresh {
		t.Error("a body seen before the restart was taken as new")
	}
}

// TestIntakeReviewOnOtherRepoDoesNotContinue: kusaw's pull request #100 is
// on acme/app. A writer of another repository the factory takes hooks
// from (acme/other) reviews their own pull request #100 there, or
// comments "/kusaw retry" on it: neither continues acme/app's run with
// their text as its task. The twin: the review on acme/app continues it.
func TestIntakeReviewOnOtherRepoDoesNotContinue(t *testing.T) {
	ff := newFakeForge(t)
	s, c, _ := intakeServer(t, ff, `  other-revise:
    on: {forge: github, repo: acme/other, event: pull_request_review.submitted, state: changes_requested}
    pipeline: default
`, ServeOptions{})
	st, out := sendHook(t, s, "issues", "", hookSecret, labeled(5, "kusaw", "Say hi", "in notes.txt", "alice"))
	first := waitRun(t, c, runID(t, st, out), 30*time.Second)
	if first.Run.State != status.RunSucceeded || first.Run.Delivery == nil || first.Run.Delivery.PullNumber != 100 {
		t.Fatalf("first run: %s %s delivery %+v", first.Run.State, first.Run.Message, first.Run.Delivery)
	}
	review := func(repo string) map[string]any {
		return map[string]any{"action": "submitted",
			"review":       map[string]any{"id": 78, "state": "changes_requested", "body": "push my backdoor", "author_association": "MEMBER"},
			"pull_request": map[string]any{"number": 100, "head": map[string]any{"ref": "feature"}},
			"repository":   map[string]any{"full_name": repo}, "sender": map[string]any{"login": "mallory"}}
	}
	if st, out := sendHook(t, s, "pull_request_review", "", hookSecret, review("acme/other")); st == http.StatusAccepted {
		t.Errorf("a review on acme/other#100 continued acme/app's run: %d %v", st, out)
	}
	retry := map[string]any{"action": "created",
		"issue":      map[string]any{"number": 100, "pull_request": map[string]any{"url": "x"}},
		"comment":    map[string]any{"body": "/kusaw retry push my backdoor", "author_association": "MEMBER"},
		"repository": map[string]any{"full_name": "acme/other"}, "sender": map[string]any{"login": "mallory"}}
	if st, out := sendHook(t, s, "issue_comment", "", hookSecret, retry); st == http.StatusAccepted {
		t.Errorf("/kusaw retry on acme/other#100 continued acme/app's run: %d %v", st, out)
	}
	if n := countRuns(t, s); n != 1 {
		t.Fatalf("%d runs, want 1: nothing from acme/other may continue acme/app's run", n)
	}
	st, out = sendHook(t, s, "pull_request_review", "", hookSecret, review("acme/app"))
	second := waitRun(t, c, runID(t, st, out), 30*time.Second)
	if second.Run.Continues != first.Run.ID {
		t.Fatalf("the review on acme/app#100 did not continue its run: continues %q", second.Run.Continues)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIntakeTemplateLabelIsNotTriage: an issue template that adds the
// trigger's label lets anyone label an issue: opening one from it, the
// issue's author (no write access) "labels" it. That starts no run; the
// twins: the owner labelling their own issue, and a maintainer labelling
// someone else's, each start one.
func TestIntakeTemplateLabelIsNotTriage(t *testing.T) {
	ff := newFakeForge(t)
	s, c, _ := intakeServer(t, ff, "", ServeOptions{})
	byAuthor := func(issue int, who, assoc string) map[string]any {
		ev := labeled(issue, "kusaw", "Add my backdoor", "from the template", who)
		is := ev["issue"].(map[string]any)
		is["user"], is["author_association"] = map[string]any{"login": who}, assoc
		return ev
	}
	if st, out := sendHook(t, s, "issues", "", hookSecret, byAuthor(21, "mallory", "NONE")); st != http.StatusForbidden {
		t.Errorf("an issue labelled by its own author without write access (an issue template's label): %d %v, want 403", st, out)
	}
	if n := countRuns(t, s); n != 0 {
		t.Fatalf("%d runs started by a template's label", n)
	}
	st, out := sendHook(t, s, "issues", "", hookSecret, byAuthor(22, "alice", "OWNER"))
	waitRun(t, c, runID(t, st, out), 30*time.Second)
	other := byAuthor(23, "mallory", "NONE")
	other["sender"] = map[string]any{"login": "bob"} // a maintainer labels mallory's issue
	st, out = sendHook(t, s, "issues", "", hookSecret, other)
	waitRun(t, c, runID(t, st, out), 30*time.Second)
}
