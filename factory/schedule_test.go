package factory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func exitAttempt(code int) *record.AttemptRecord {
	return &record.AttemptRecord{Outcome: status.OutcomeFailed, Reason: status.ReasonStepExitNonzero, ExitCode: &code}
}

func TestDecideRetry(t *testing.T) {
	exit3 := &config.Step{Attempts: 3, Retry: &config.Retry{On: []config.RetryOn{{Kind: "exit", Codes: []int{3}}}, Backoff: time.Second}}
	timeouts := &config.Step{Attempts: 2, OnFailure: "fix", Retry: &config.Retry{On: []config.RetryOn{{Kind: "timeout"}, {Kind: "provider_error"}, {Kind: "sandbox_unavailable"}, {Kind: "lost"}}}}
	plain := &config.Step{Attempts: 2}
	cases := []struct {
		name     string
		s        *config.Step
		made     int
		last     *record.AttemptRecord
		again    bool
		fix      bool
		backoff  time.Duration
		whyHolds string
	}{
		{"passed", plain, 1, &record.AttemptRecord{Outcome: status.OutcomePassed}, false, false, 0, "passed"},
		{"any failure", plain, 1, exitAttempt(7), true, false, 0, "any failure"},
		{"none left", plain, 2, exitAttempt(7), false, false, 0, "none left"},
		{"refusal without rules", plain, 1, &record.AttemptRecord{Outcome: status.OutcomeRefused, Reason: status.ReasonSandboxUnavailable}, false, false, 0, "not in retry.on"},
		{"canceled", plain, 1, &record.AttemptRecord{Outcome: status.OutcomeCanceled}, false, false, 0, "stopped"},
		{"exit 3 listed", exit3, 1, exitAttempt(3), true, false, time.Second, "exit:3"},
		{"exit 4 not listed", exit3, 1, exitAttempt(4), false, false, 0, "not in retry.on (exit:3)"},
		{"exit 3 last attempt", exit3, 3, exitAttempt(3), false, false, 0, "none left"},
		{"timeout listed with fixer", timeouts, 1, &record.AttemptRecord{Outcome: status.OutcomeTimedOut, Reason: status.ReasonStepTimeout}, true, true, 0, "timeout"},
		{"plain failure not listed", timeouts, 1, exitAttempt(1), false, false, 0, "not in retry.on"},
		{"provider error", timeouts, 1, &record.AttemptRecord{Outcome: status.OutcomeFailed, Reason: status.ReasonProviderError}, true, true, 0, "provider_error"},
		{"sandbox unavailable", timeouts, 1, &record.AttemptRecord{Outcome: status.OutcomeRefused, Reason: status.ReasonSandboxUnavailable}, true, true, 0, "sandbox_unavailable"},
		{"lost", timeouts, 1, &record.AttemptRecord{Outcome: status.OutcomeLost, Reason: status.ReasonLost}, true, true, 0, "lost"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := decideRetry(c.s, c.made, c.last)
			if p.Again != c.again || p.Fix != c.fix || p.Backoff != c.backoff || !strings.Contains(p.Why, c.whyHolds) {
				t.Fatalf("got %+v, want again=%v fix=%v backoff=%v why containing %q", p, c.again, c.fix, c.backoff, c.whyHolds)
			}
		})
	}
}

func TestDecideGroup(t *testing.T) {
	m := func(step string, done bool, o status.Outcome, cont bool) memberState {
		return memberState{Step: step, Done: done, Outcome: o, ContinueOnFailure: cont}
	}
	p := decideGroup([]memberState{m("a", true, status.OutcomePassed, false), m("b", false, "", false)})
	if p.Done || p.CancelRest || p.Failed != -1 {
		t.Fatalf("one passed, one running: %+v", p)
	}
	p = decideGroup([]memberState{m("a", false, "", false), m("b", true, status.OutcomeFailed, false)})
	if p.Done || !p.CancelRest || p.Failed != 1 || !strings.Contains(p.Why, "member b failed") {
		t.Fatalf("a failure stops the siblings: %+v", p)
	}
	p = decideGroup([]memberState{m("a", false, "", false), m("b", true, status.OutcomeFailed, true)})
	if p.CancelRest || p.Failed != -1 {
		t.Fatalf("continue_on_failure fails alone: %+v", p)
	}
	p = decideGroup([]memberState{m("a", true, status.OutcomePassed, false), m("b", true, status.OutcomeFailed, true)})
	if !p.Done || p.Failed != -1 {
		t.Fatalf("all ended, the failure tolerated: %+v", p)
	}
	p = decideGroup([]memberState{m("a", true, status.OutcomeCanceled, false), m("b", true, status.OutcomeFailed, false)})
	if !p.Done || p.Failed != 1 || p.CancelRest {
		t.Fatalf("all ended: the member that failed on its own is named, not the one it stopped: %+v", p)
	}
}

func TestDecideCandidates(t *testing.T) {
	c := func(n, order int, passed bool, size int) candState {
		return candState{N: n, Order: order, Passed: passed, DiffSize: size}
	}
	cases := []struct {
		name  string
		sel   config.Select
		cs    []candState
		want  candPlan
		holds string
	}{
		{"first: none ended", "", []candState{c(1, 0, false, 0), c(2, 0, false, 0)}, candPlan{}, ""},
		{"first: 2 passes while 1 runs", config.SelectFirst, []candState{c(1, 0, false, 0), c(2, 1, true, 0)}, candPlan{Done: true, Winner: 2, CancelRest: true}, "candidate 2 passed first"},
		{"first: 1 failed, 2 runs", "", []candState{c(1, 1, false, 0), c(2, 0, false, 0)}, candPlan{}, ""},
		{"first: all failed", "", []candState{c(1, 1, false, 0), c(2, 2, false, 0)}, candPlan{Done: true}, "no candidate passed"},
		{"all: waits", config.SelectAll, []candState{c(1, 1, true, 10), c(2, 0, false, 0)}, candPlan{}, ""},
		{"all: smallest diff", config.SelectAll, []candState{c(1, 1, true, 10), c(2, 2, true, 5), c(3, 3, true, 5)}, candPlan{Done: true, Winner: 2}, "smallest diff"},
		{"judge: two passed", config.SelectJudge, []candState{c(1, 2, true, 1), c(2, 1, true, 1), c(3, 3, false, 0)}, candPlan{Judge: true}, "judge chooses"},
		{"judge: only one passed", config.SelectJudge, []candState{c(1, 2, false, 1), c(2, 1, true, 1)}, candPlan{Done: true, Winner: 2}, "only candidate 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := decideCandidates(tc.sel, tc.cs)
			why := p.Why
			p.Why = ""
			if p != tc.want || !strings.Contains(why, tc.holds) {
				t.Fatalf("got %+v (%s), want %+v (%q)", p, why, tc.want, tc.holds)
			}
		})
	}
}

func TestItemsOf(t *testing.T) {
	pl := &config.Pipeline{Steps: []config.PipelineItem{{Step: "a"}, {Group: []string{"b", "c"}}, {Step: "d"}, {Group: []string{"e", "f"}}}}
	var steps []*config.Step
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		steps = append(steps, &config.Step{ID: id})
	}
	its := itemsOf(pl, steps)
	if len(its) != 4 || its[1].group != 1 || len(its[1].idx) != 2 || its[1].idx[1] != 2 || its[3].group != 2 || its[2].idx[0] != 3 {
		t.Fatalf("items: %+v", its)
	}
	if its := itemsOf(nil, steps[:2]); len(its) != 2 || its[0].group != 0 {
		t.Fatalf("steps of no pipeline: %+v", its)
	}
}

func TestTailLines(t *testing.T) {
	b := []byte("1\n2\n3\n4\n")
	if got := string(tailLines(b, 2, 100)); got != "3\n4\n" {
		t.Fatalf("tail: %q", got)
	}
	if got := string(tailLines(b, 10, 3)); got != "3\n4\n" {
		t.Fatalf("tail bounded by bytes: %q", got)
	}
}

func TestDecideGate(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Second), now.Add(time.Second)
	cases := []struct {
		decided  bool
		deadline *time.Time
		want     gatePlan
	}{
		{false, nil, gateWait},
		{false, &future, gateWait},
		{false, &past, gateTimeout},
		{false, &now, gateTimeout},
		{true, &past, gateDecided}, // taken before the engine looked: it stands
		{true, nil, gateDecided},
	}
	for _, c := range cases {
		if got := decideGate(c.decided, c.deadline, now); got != c.want {
			t.Errorf("decided=%v deadline=%v: %v, want %v", c.decided, c.deadline, got, c.want)
		}
	}
}

func TestReadTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.log")
	os.WriteFile(p, []byte(strings.Repeat("x", 200<<10)+"last line\n"), 0o644)
	b := readTail(p, 64<<10)
	if len(b) != 64<<10 || !strings.HasSuffix(string(b), "last line\n") {
		t.Fatalf("tail: %d bytes, ends %q", len(b), b[len(b)-12:])
	}
	if readTail(filepath.Dir(p), 10) != nil || readTail(p+".none", 10) != nil {
		t.Fatal("a folder or a missing file gave bytes")
	}
}
