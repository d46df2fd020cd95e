package factory

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// The scheduling decisions of a pipeline's shapes, as pure functions of
// what has happened so far: which attempt runs next, which siblings stop,
// which candidate wins. pipeline.go carries them out with git and
// processes; these are tested without either (schedule_test.go).

// retryPlan is what follows a finished attempt of a step.
type retryPlan struct {
	Again   bool          // another attempt runs
	Fix     bool          // the step's on_failure fixer runs first
	Backoff time.Duration // wait this long before it
	Why     string        // for the step's events
}

// decideRetry decides, after attempt number made (1-based within this
// occurrence of the step) ended as last, whether the step tries again.
// attempts: N alone retries any failure; retry.on narrows it to the
// outcomes and exit codes listed, and anything else ends the step at once.
func decideRetry(s *config.Step, made int, last *record.AttemptRecord) retryPlan {
	switch last.Outcome {
	case status.OutcomePassed:
		return retryPlan{Why: "passed"}
	case status.OutcomeCanceled, status.OutcomeInterrupted:
		return retryPlan{Why: "the run was stopped"}
	}
	on := retryMatch(s, last)
	if on == "" {
		return retryPlan{Why: fmt.Sprintf("%s is not in retry.on (%s): no retry", describeFailure(last), retryOnList(s))}
	}
	if made >= s.Attempts {
		return retryPlan{Why: fmt.Sprintf("%s after %d of %d attempts: none left", describeFailure(last), made, s.Attempts)}
	}
	p := retryPlan{Again: true, Fix: s.OnFailure != "", Why: fmt.Sprintf("%s matches retry on %s: attempt %d of %d", describeFailure(last), on, made+1, s.Attempts)}
	if s.Retry != nil {
		p.Backoff = s.Retry.Backoff
	}
	return p
}

// retryMatch names the retry.on entry that matches a failed attempt, or
// "" when none does. Without retry.on every failure matches except a
// refusal (a step the sandbox refused would be refused again).
func retryMatch(s *config.Step, a *record.AttemptRecord) string {
	if s.Retry == nil || len(s.Retry.On) == 0 {
		if a.Outcome == status.OutcomeRefused {
			return ""
		}
		return "any failure"
	}
	for _, o := range s.Retry.On {
		ok := false
		switch o.Kind {
		case "failed":
			ok = a.Outcome == status.OutcomeFailed
		case "timeout":
			ok = a.Outcome == status.OutcomeTimedOut
		case "provider_error":
			ok = strings.HasPrefix(string(a.Reason), "provider.")
		case "lost":
			ok = a.Outcome == status.OutcomeLost || a.Reason == status.ReasonLost
		case "sandbox_unavailable":
			ok = a.Reason == status.ReasonSandboxUnavailable
		case "exit":
			ok = a.Outcome == status.OutcomeFailed && a.ExitCode != nil && slices.Contains(o.Codes, *a.ExitCode)
		}
		if ok {
			return o.String()
		}
	}
	return ""
}

func retryOnList(s *config.Step) string {
	if s.Retry == nil || len(s.Retry.On) == 0 {
		return "any failure but a refusal"
	}
	var out []string
	for _, o := range s.Retry.On {
		out = append(out, o.String())
	}
	return strings.Join(out, ", ")
}

func describeFailure(a *record.AttemptRecord) string {
	d := string(a.Outcome)
	if a.Reason != "" {
		d += " (" + string(a.Reason) + ")"
	}
	if a.ExitCode != nil && *a.ExitCode != 0 {
		d += fmt.Sprintf(" exit %d", *a.ExitCode)
	}
	return d
}

// memberState is one member of a parallel group as the group sees it.
type memberState struct {
	Step              string
	Done              bool
	Outcome           status.Outcome
	ContinueOnFailure bool
}

// groupPlan is what a parallel group does next.
type groupPlan struct {
	CancelRest bool // stop the members still running
	Failed     int  // index of the member that fails the group, -1 for none
	Done       bool // every member has ended
	Why        string
}

// decideGroup decides after a member ended: the first member that fails
// (without continue_on_failure) fails the group and stops its siblings;
// a member with continue_on_failure may fail alone.
func decideGroup(ms []memberState) groupPlan {
	p := groupPlan{Failed: -1, Done: true}
	// A member stopped because a sibling failed is not the cause: the
	// first member that failed on its own is named when there is one.
	for _, stopped := range []bool{false, true} {
		for i, m := range ms {
			if !m.Done {
				p.Done = false
				continue
			}
			if m.Outcome != status.OutcomePassed && !m.ContinueOnFailure && p.Failed < 0 && (m.Outcome == status.OutcomeCanceled) == stopped {
				p.Failed = i
				p.Why = fmt.Sprintf("member %s %s", m.Step, m.Outcome)
			}
		}
	}
	if p.Failed >= 0 && !p.Done {
		p.CancelRest = true
		p.Why += ": its running siblings are stopped (set continue_on_failure: true on a member to let it fail alone)"
	}
	return p
}

// gatePlan is what a waiting gate does next.
type gatePlan int

const (
	gateWait    gatePlan = iota // no decision yet
	gateDecided                 // a decision was taken: it stands
	gateTimeout                 // none, and the deadline passed: the gate rejects itself
)

// decideGate decides at one moment of a gate's wait: a decision taken
// stands, whenever it came; without one, a passed deadline rejects.
func decideGate(decided bool, deadline *time.Time, now time.Time) gatePlan {
	switch {
	case decided:
		return gateDecided
	case deadline != nil && !now.Before(*deadline):
		return gateTimeout
	}
	return gateWait
}

// candState is one candidate of a step as the selection sees it; Order
// is when it ended (1 first), 0 while it runs.
type candState struct {
	N        int
	Order    int
	Passed   bool
	DiffSize int // bytes of its patch, for select: all
}

// candPlan is what a step with candidates does next.
type candPlan struct {
	Done       bool
	Winner     int  // candidate number kept, 0 for none
	CancelRest bool // stop the candidates still running
	Judge      bool // run the judge over the passing candidates
	Why        string
}

// decideCandidates decides after a candidate ended. first keeps the
// earliest to pass and stops the rest; all waits for every candidate and
// keeps the passing one with the smallest diff (the lowest number on a
// tie); judge waits for every candidate and asks the judge when more than
// one passed.
func decideCandidates(sel config.Select, cs []candState) candPlan {
	running, passing := 0, []candState{}
	for _, c := range cs {
		if c.Order == 0 {
			running++
		} else if c.Passed {
			passing = append(passing, c)
		}
	}
	if sel == "" || sel == config.SelectFirst {
		var first *candState
		for i := range passing {
			if first == nil || passing[i].Order < first.Order {
				first = &passing[i]
			}
		}
		if first != nil {
			return candPlan{Done: true, Winner: first.N, CancelRest: running > 0, Why: fmt.Sprintf("candidate %d passed first", first.N)}
		}
	}
	if running > 0 {
		return candPlan{}
	}
	switch {
	case len(passing) == 0:
		return candPlan{Done: true, Why: "no candidate passed"}
	case len(passing) == 1:
		return candPlan{Done: true, Winner: passing[0].N, Why: fmt.Sprintf("only candidate %d passed", passing[0].N)}
	case sel == config.SelectJudge:
		return candPlan{Judge: true, Why: fmt.Sprintf("%d candidates passed: the judge chooses", len(passing))}
	}
	best := passing[0]
	for _, c := range passing[1:] {
		if c.DiffSize < best.DiffSize || c.DiffSize == best.DiffSize && c.N < best.N {
			best = c
		}
	}
	return candPlan{Done: true, Winner: best.N, Why: fmt.Sprintf("candidate %d passed with the smallest diff (%d bytes)", best.N, best.DiffSize)}
}
