package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// showFixture is a run with a failed-then-fixed step, a parallel group
// and a helper, as kusaw show reads it.
func showFixture() *runView {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(90 * time.Second)
	one, zero := 1, 0
	at := func(step string, n, of int, oc status.Outcome, exit *int, role *record.AttemptRole) *record.AttemptRecord {
		fin := t0.Add(1500 * time.Millisecond)
		return &record.AttemptRecord{Step: step, Number: n, Of: of, Outcome: oc, ExitCode: exit, Started: t0, Finished: &fin,
			Mode: "required", ModeOrigin: "steps." + step + ".sandbox.mode", Role: role}
	}
	failed := at("check", 1, 2, status.OutcomeFailed, &one, nil)
	failed.Reason, failed.Message, failed.Fix = status.ReasonStepExitNonzero, "exit code 1", "read stderr.log"
	failed.Processes = []record.ProcessRecord{{Argv: []string{"sh", "-c", "go test ./..."}}}
	return &runView{
		Run: &record.RunRecord{ID: "20261201-100000-abcd", Pipeline: "default", State: status.RunFailed, Started: &t0, Finished: &t1,
			Reason: status.ReasonStepExitNonzero, Message: "step b failed", Fix: "see kusaw show",
			Repos: []record.RunRepo{{Name: "app", Branch: "kusaw/run-abcd", BaseSHA: "1111111111aaaa", HeadSHA: "2222222222bbbb"}},
			Steps: []record.StepResult{{ID: "check", Outcome: status.OutcomePassed, Attempts: 2},
				{ID: "a", Outcome: status.OutcomePassed, Attempts: 1, Group: 1}, {ID: "b", Outcome: status.OutcomeFailed, Reason: status.ReasonStepExitNonzero, Attempts: 1, Group: 1}}},
		Dir:      "/srv/state/runs/20261201-100000-abcd",
		Attempts: []*record.AttemptRecord{failed, at("check", 2, 2, status.OutcomePassed, &zero, nil), at("a", 1, 1, status.OutcomePassed, &zero, nil), at("b", 1, 1, status.OutcomeFailed, &one, nil)},
		Helpers:  []*record.AttemptRecord{at("fix", 1, 1, status.OutcomePassed, &zero, record.FixerRole("check", 1))},
	}
}

// kusaw show's text printer: the whole page, so a change in what it
// prints is a visible diff.
func TestShowText(t *testing.T) {
	var b bytes.Buffer
	newShowPrinter(&b, false).Show(showFixture())
	want := `run 20261201-100000-abcd  pipeline default  failed  1m30s
  reason: step.exit_nonzero: step b failed
  fix: see kusaw show
  folder: /srv/state/runs/20261201-100000-abcd
  repo app: kusaw/run-abcd 1111111111 → 2222222222 (base HEAD)
step check: passed
  attempt 1/2: failed exit 1  1.5s  sandbox required (steps.check.sandbox.mode)
    reason: step.exit_nonzero: exit code 1
    fix: read stderr.log
    argv: sh -c go test ./...
  ↳ fixer for step check after its attempt 1: step fix attempt 1/1: passed exit 0  1.5s  sandbox required (steps.fix.sandbox.mode)
  attempt 2/2: passed exit 0  1.5s  sandbox required (steps.check.sandbox.mode)
parallel group 1: a passed (1 attempt(s)) │ b failed (1 attempt(s))
│ step a: passed
  attempt 1/1: passed exit 0  1.5s  sandbox required (steps.a.sandbox.mode)
│ step b: failed (step.exit_nonzero)
  attempt 1/1: failed exit 1  1.5s  sandbox required (steps.b.sandbox.mode)
`
	if b.String() != want {
		t.Errorf("kusaw show:\n%s\nwant:\n%s", b.String(), want)
	}
}

// kusaw show --json: the run, its attempts and its helpers under keys of
// their own; helpers is [] when there are none.
func TestShowJSON(t *testing.T) {
	v := showFixture()
	for _, helpers := range [][]*record.AttemptRecord{v.Helpers, nil} {
		v.Helpers = helpers
		var b bytes.Buffer
		newShowPrinter(&b, true).Show(v)
		var got struct {
			Run      *record.RunRecord        `json:"run"`
			Attempts []*record.AttemptRecord  `json:"attempts"`
			Helpers  *[]*record.AttemptRecord `json:"helpers"`
		}
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%v\n%s", err, b.String())
		}
		if got.Run.ID != v.Run.ID || len(got.Attempts) != 4 || got.Helpers == nil || len(*got.Helpers) != len(helpers) {
			t.Errorf("kusaw show --json with %d helpers:\n%s", len(helpers), b.String())
		}
	}
}
