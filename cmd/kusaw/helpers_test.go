package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
)

// TestRunOrder: each helper follows what it served (a fixer its failed
// attempt, a judge its step, a resolve its group's last member); one with
// no role (a record from before roles) or whose place is gone comes last,
// in the order it ran; a step listed twice gets its helpers once.
func TestRunOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(step string, n, sec int, role *record.AttemptRole) *record.AttemptRecord {
		return &record.AttemptRecord{Step: step, Number: n, Started: t0.Add(time.Duration(sec) * time.Second), Role: role}
	}
	r := &record.RunRecord{Steps: []record.StepResult{{ID: "check"}, {ID: "try"}, {ID: "one", Group: 1}, {ID: "two", Group: 1}, {ID: "check"}}}
	own := []*record.AttemptRecord{at("check", 1, 0, nil), at("check", 2, 2, nil), at("try", 1, 3, nil), at("try", 2, 3, nil), at("one", 1, 5, nil), at("two", 1, 5, nil)}
	helpers := []*record.AttemptRecord{
		at("fixer", 1, 1, record.FixerRole("check", 1)),
		at("old", 1, 2, nil), // no role: last
		at("pick", 1, 4, record.JudgeRole("try")),
		at("merger", 1, 6, record.ResolveRole(1, "two", "app")),
		at("fixer", 2, 7, record.FixerRole("gone", 3)), // its step is not in the run: last
	}
	var got []string
	for _, a := range runOrder(r, own, helpers) {
		got = append(got, fmt.Sprintf("%s/%d", a.Step, a.Number))
	}
	want := "check/1 fixer/1 check/2 try/1 try/2 pick/1 one/1 two/1 merger/1 old/1 fixer/2"
	if strings.Join(got, " ") != want {
		t.Fatalf("order:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if l := helperLabel(helpers[1]); l != "helper step old" {
		t.Errorf("a helper without a role: %q", l)
	}
}
