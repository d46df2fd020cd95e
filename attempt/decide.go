package attempt

import (
	"fmt"
	"strings"
	"time"

	"github.com/kusaw/kusaw/status"
)

// How an attempt's outcome is decided: every phase records what it found
// (ending), and decideOutcome, a pure function, turns that into the one
// outcome, reason and message the record carries. The order of the rules
// lives here, and only here (decide_test.go walks it).

// Verdict is an outcome with its reason, message and fix ("": the
// reason's own fix).
type Verdict struct {
	Outcome status.Outcome
	Reason  status.Reason
	Message string
	Fix     string
}

// ending is what the attempt's phases found, in the order they run.
type ending struct {
	// write: a record could not be written (output, events, attempt.json,
	// egress.log). It wins: the attempt ended because of it, and what it
	// would otherwise say may not be on disk.
	write *Verdict
	// early: a phase before the processes ended the attempt (worktrees,
	// set-up, a cache, a refusal), or the attempt could not start.
	early *Verdict
	// decided: another executor's verdict (the cluster's dispatch: the
	// worker's, or lost).
	decided *Verdict
	// procs: the processes' verdict (decideProcesses), once they ran.
	procs *Verdict
	// commit: committing the worktrees or moving the run branch failed.
	commit *Verdict
	// interrupted: a cancel is serve stopping.
	interrupted bool
}

// decideOutcome is the attempt's outcome from what its phases found: a
// failed write first, then what ended it before its processes, then the
// processes' (or another executor's) verdict, which a failed commit turns
// from passed to failed. An attempt nothing decided is an internal error.
func decideOutcome(e ending) Verdict {
	var v Verdict
	switch {
	case e.write != nil:
		return *e.write
	case e.early != nil:
		v = *e.early
	case e.decided != nil:
		v = *e.decided
	case e.procs != nil:
		v = *e.procs
	default:
		return Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonInternal, Message: "the attempt ended without an outcome"}
	}
	if v.Outcome == status.OutcomePassed && e.commit != nil {
		v = *e.commit
	}
	if v.Outcome == status.OutcomeCanceled && e.interrupted {
		v = Verdict{Outcome: status.OutcomeInterrupted, Reason: status.ReasonRunInterrupted, Message: "kusaw serve stopped while the attempt ran"}
	}
	return v
}

// procEnd is what is known of how one process ended.
type procEnd struct {
	stopped  bool // kusaw signalled it (timeout, cancel, limit, or after its result)
	startErr string
	// canceled: the run's context had ended; timedOut: the step's
	// timeout had passed.
	canceled, timedOut bool
	timeout            time.Duration
	// limit names the sandbox.resources limit it reached, and limitValue
	// its value.
	limit, limitValue string
	// stepLimit is the step's limits.* the attempt crossed (its message).
	stepLimit string
	// afterResult: kusaw stopped it after its result, which is result.
	afterResult bool
	result      Verdict
	// ended is how it ended on its own (its exit status, or the provider's
	// result).
	ended Verdict
	// setupFailed is the in-sandbox setup's failing command, when one
	// failed.
	setupFailed string
	// budget: an egress byte budget was reached.
	budget bool
	// untrusted: the proxy refused an inject upstream's certificate (its
	// line, naming the host and the ca_file setting).
	untrusted string
	hasExit   bool
	exit      int
}

// decideProcess is how one process ended. A process that ended on its own
// before a cancel or timeout is judged by how it ended; only one kusaw
// stopped (or that could not start once the time was up) is canceled or
// timed out.
func decideProcess(p procEnd) Verdict {
	stopped := p.stopped || (p.startErr != "" && p.timedOut)
	timedOut := Verdict{Outcome: status.OutcomeTimedOut, Reason: status.ReasonStepTimeout, Message: fmt.Sprintf("the step ran longer than its timeout (%s)", p.timeout)}
	switch {
	case stopped && p.canceled:
		return Verdict{Outcome: status.OutcomeCanceled, Reason: status.ReasonStepCanceled, Message: "the run was canceled"}
	case stopped && p.timedOut:
		return timedOut
	case p.limit != "":
		return Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonResourceLimit,
			Message: fmt.Sprintf("the step reached its %s limit (%s; sandbox.resources.%s)", p.limit, p.limitValue, p.limit)}
	case p.stepLimit != "":
		return Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonLimitReached, Message: p.stepLimit}
	case p.stopped && p.afterResult:
		// Stopped by kusaw after its result: the result decides, not the
		// signal that ended it.
		return p.result
	case stopped:
		return timedOut
	case p.startErr != "":
		return Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonStepStartFailed, Message: p.startErr}
	}
	v := p.ended
	if p.setupFailed != "" && v.Outcome != status.OutcomePassed {
		v = Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonSetupFailed, Message: p.setupFailed}
	}
	if v.Outcome == status.OutcomeFailed && p.untrusted != "" {
		v.Reason, v.Message = status.ReasonEgressUpstreamUntrusted, strings.TrimPrefix(p.untrusted, "kusaw: ")
	}
	if v.Outcome == status.OutcomeFailed && p.budget {
		v.Reason, v.Message = status.ReasonEgressBudget, v.Message+"; an egress byte budget was reached (see egress.log)"
	}
	return v
}

// decideProcesses is the attempt's verdict from its processes': canceled
// and timed out win, then refused, then the first process that did not
// pass. The exit code is the deciding process's (one that has none keeps
// the one before), 0 when they all passed.
func decideProcesses(ps []procEnd, vs []Verdict) (Verdict, *int) {
	v := Verdict{Outcome: status.OutcomePassed}
	var exit *int
	for i, pv := range vs {
		if pv.Outcome != status.OutcomePassed && (v.Outcome == status.OutcomePassed || rank(pv.Outcome) > rank(v.Outcome)) {
			v = pv
			if ps[i].hasExit {
				x := ps[i].exit
				exit = &x
			}
		}
	}
	if v.Outcome == status.OutcomePassed && len(vs) > 0 {
		x := 0
		exit = &x
	}
	return v, exit
}

func rank(o status.Outcome) int {
	switch o {
	case status.OutcomeCanceled:
		return 4
	case status.OutcomeTimedOut:
		return 3
	case status.OutcomeRefused:
		return 2
	case status.OutcomeFailed:
		return 1
	}
	return 0
}

// decide puts the outcome decideOutcome gives into the record.
func (a *Attempt) decide() {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.end
	e.interrupted = a.job.Interrupted != nil && a.job.Interrupted()
	v := decideOutcome(e)
	a.rec.Outcome, a.rec.Reason, a.rec.Message, a.rec.Fix = v.Outcome, v.Reason, a.redact.String(v.Message), v.Fix
	if v.Fix == "" && v.Reason != status.ReasonNone {
		a.rec.Fix = a.hintedFix(v.Reason)
	}
	if v.Fix == "" && v.Reason == status.ReasonNone {
		a.rec.Fix = ""
	}
}

// endEarly ends the attempt before its processes (a phase failed).
func (a *Attempt) endEarly(v Verdict) {
	a.mu.Lock()
	if a.end.early == nil {
		a.end.early = &v
	}
	a.mu.Unlock()
	a.decide()
}

// Decide records another executor's verdict (the cluster's dispatch).
func (a *Attempt) Decide(v Verdict) {
	a.mu.Lock()
	a.end.decided = &v
	a.mu.Unlock()
	a.decide()
}

// SetOutcome is Decide with the reason's own fix.
func (a *Attempt) SetOutcome(o status.Outcome, r status.Reason, msg string) {
	a.Decide(Verdict{Outcome: o, Reason: r, Message: msg})
}

// CommitFailed records that the attempt's work could not be committed or
// its run branch moved: a passing attempt fails (the first failure is
// the one named).
func (a *Attempt) CommitFailed(msg string) {
	a.mu.Lock()
	if a.end.commit == nil {
		a.end.commit = &Verdict{Outcome: status.OutcomeFailed, Reason: status.ReasonCommitFailed, Message: msg}
	}
	a.mu.Unlock()
	a.decide()
}
