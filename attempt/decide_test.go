package attempt

import (
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/status"
)

func TestDecideProcess(t *testing.T) {
	passed := Verdict{Outcome: status.OutcomePassed}
	exited := Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonStepExitNonzero, Message: "the process ended with exit code 2"}
	result := Verdict{Outcome: status.OutcomePassed}
	for _, tc := range []struct {
		name string
		p    procEnd
		want status.Reason
		out  status.Outcome
	}{
		{"passed", procEnd{ended: passed}, status.ReasonNone, status.OutcomePassed},
		{"exit", procEnd{ended: exited}, status.ReasonStepExitNonzero, status.OutcomeFailed},
		// Canceled wins over the timeout that a cancel also ends.
		{"canceled", procEnd{stopped: true, canceled: true, timedOut: true}, status.ReasonStepCanceled, status.OutcomeCanceled},
		{"timeout", procEnd{stopped: true, timedOut: true}, status.ReasonStepTimeout, status.OutcomeTimedOut},
		// A process that ended on its own before a cancel is judged by how it ended.
		{"ended before the cancel", procEnd{canceled: true, timedOut: true, ended: exited}, status.ReasonStepExitNonzero, status.OutcomeFailed},
		// One that could not start once the time was up timed out.
		{"no start after the timeout", procEnd{startErr: "exec: killed", timedOut: true}, status.ReasonStepTimeout, status.OutcomeTimedOut},
		{"start failed", procEnd{startErr: "exec: no such file"}, status.ReasonStepStartFailed, status.OutcomeFailed},
		// A resource limit names itself even though kusaw stopped it.
		{"resource limit", procEnd{stopped: true, limit: "memory", limitValue: "1 GiB"}, status.ReasonResourceLimit, status.OutcomeFailed},
		{"step limit", procEnd{stopped: true, stepLimit: "the step's limits.turns (3) was reached: 4 used"}, status.ReasonLimitReached, status.OutcomeFailed},
		// Stopped after its result: the result decides, not the signal.
		{"after its result", procEnd{stopped: true, afterResult: true, result: result}, status.ReasonNone, status.OutcomePassed},
		{"stopped otherwise", procEnd{stopped: true}, status.ReasonStepTimeout, status.OutcomeTimedOut},
		// The in-sandbox setup's failure is named, not the step's exit.
		{"setup", procEnd{ended: exited, setupFailed: "setup \"npm ci\" in app exited with exit code 1"}, status.ReasonSetupFailed, status.OutcomeFailed},
		{"setup but passed", procEnd{ended: passed, setupFailed: "stale marker"}, status.ReasonNone, status.OutcomePassed},
		{"budget", procEnd{ended: exited, budget: true}, status.ReasonEgressBudget, status.OutcomeFailed},
		{"budget but passed", procEnd{ended: passed, budget: true}, status.ReasonNone, status.OutcomePassed},
	} {
		tc.p.timeout = time.Minute
		v := decideProcess(tc.p)
		if v.Outcome != tc.out || v.Reason != tc.want {
			t.Errorf("%s: %s %s (%s), want %s %s", tc.name, v.Outcome, v.Reason, v.Message, tc.out, tc.want)
		}
	}
	if v := decideProcess(procEnd{stopped: true, timedOut: true, timeout: 90 * time.Second}); !strings.Contains(v.Message, "1m30s") {
		t.Errorf("the timeout's message does not name it: %q", v.Message)
	}
	if v := decideProcess(procEnd{ended: exited, budget: true}); !strings.HasPrefix(v.Message, exited.Message) {
		t.Errorf("the budget hides the exit: %q", v.Message)
	}
}

func TestDecideProcesses(t *testing.T) {
	failed := Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonStepExitNonzero}
	other := Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonSetupFailed}
	canceled := Verdict{Outcome: status.OutcomeCanceled, Reason: status.ReasonStepCanceled}
	passed := Verdict{Outcome: status.OutcomePassed}
	exit := func(n int) procEnd { return procEnd{hasExit: true, exit: n} }
	for _, tc := range []struct {
		name string
		ps   []procEnd
		vs   []Verdict
		want Verdict
		exit int // -1: none
	}{
		{"all passed", []procEnd{exit(0), exit(0)}, []Verdict{passed, passed}, passed, 0},
		{"the first failure", []procEnd{exit(0), exit(2), exit(3)}, []Verdict{passed, failed, other}, failed, 2},
		{"canceled wins", []procEnd{exit(2), {}}, []Verdict{failed, canceled}, canceled, 2},
		{"no exit", []procEnd{{}}, []Verdict{failed}, failed, -1},
	} {
		v, x := decideProcesses(tc.ps, tc.vs)
		if v != tc.want || (tc.exit < 0) != (x == nil) || x != nil && *x != tc.exit {
			t.Errorf("%s: %+v exit %v, want %+v exit %d", tc.name, v, x, tc.want, tc.exit)
		}
	}
}

func TestDecideOutcome(t *testing.T) {
	v := func(o status.Outcome, r status.Reason) *Verdict { return &Verdict{Outcome: o, Reason: r} }
	write := v(status.OutcomeFailed, status.ReasonStateWriteFailed)
	early := v(status.OutcomeFailed, status.ReasonWorktreeFailed)
	passed := v(status.OutcomePassed, status.ReasonNone)
	failed := v(status.OutcomeFailed, status.ReasonStepExitNonzero)
	commit := v(status.OutcomeFailed, status.ReasonCommitFailed)
	canceled := v(status.OutcomeCanceled, status.ReasonStepCanceled)
	for _, tc := range []struct {
		name string
		e    ending
		want status.Reason
	}{
		{"nothing decided", ending{}, status.ReasonInternal},
		{"passed", ending{procs: passed}, status.ReasonNone},
		// A failed write wins: the attempt ended because of it.
		{"write over the processes", ending{write: write, procs: passed}, status.ReasonStateWriteFailed},
		{"write over a phase", ending{write: write, early: early}, status.ReasonStateWriteFailed},
		{"phase", ending{early: early}, status.ReasonWorktreeFailed},
		{"commit fails a pass", ending{procs: passed, commit: commit}, status.ReasonCommitFailed},
		{"commit leaves a failure", ending{procs: failed, commit: commit}, status.ReasonStepExitNonzero},
		{"another executor's", ending{decided: failed}, status.ReasonStepExitNonzero},
		{"another executor's pass and a commit", ending{decided: passed, commit: commit}, status.ReasonCommitFailed},
		{"canceled", ending{procs: canceled}, status.ReasonStepCanceled},
		{"interrupted", ending{procs: canceled, interrupted: true}, status.ReasonRunInterrupted},
		{"interrupted, not canceled", ending{procs: failed, interrupted: true}, status.ReasonStepExitNonzero},
	} {
		if got := decideOutcome(tc.e); got.Reason != tc.want {
			t.Errorf("%s: %s %s, want %s", tc.name, got.Outcome, got.Reason, tc.want)
		}
	}
}
