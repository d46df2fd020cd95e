package status

// RunState is the state of one run of a pipeline.
type RunState string

const (
	RunQueued      RunState = "queued"
	RunRunning     RunState = "running"
	RunWaiting     RunState = "waiting"
	RunSucceeded   RunState = "succeeded"
	RunFailed      RunState = "failed"
	RunCanceled    RunState = "canceled"
	RunInterrupted RunState = "interrupted"
)

// RunStates lists every run state with what it means, in lifecycle order.
var RunStates = []Described[RunState]{
	{RunQueued, "accepted and waiting for a free slot"},
	{RunRunning, "a step of the run is executing"},
	{RunWaiting, "the run waits at an approval gate for kusaw approve or kusaw reject (or the gate's timeout)"},
	{RunSucceeded, "every step of the pipeline passed"},
	{RunFailed, "a step failed after its last attempt"},
	{RunCanceled, "stopped on request (kusaw cancel, Ctrl-C)"},
	{RunInterrupted, "kusaw stopped while it ran (crash, kill -9, shutdown); found and marked by the next kusaw that opened the state directory"},
}

// Final reports whether no further change to the run will happen.
func (s RunState) Final() bool {
	return s == RunSucceeded || s == RunFailed || s == RunCanceled || s == RunInterrupted
}

// Outcome is how one attempt of a step ended.
type Outcome string

const (
	OutcomePassed      Outcome = "passed"
	OutcomeFailed      Outcome = "failed"
	OutcomeTimedOut    Outcome = "timed_out"
	OutcomeCanceled    Outcome = "canceled"
	OutcomeRefused     Outcome = "refused"
	OutcomeInterrupted Outcome = "interrupted"
	OutcomeLost        Outcome = "lost"
)

// Outcomes lists every attempt outcome with what it means.
var Outcomes = []Described[Outcome]{
	{OutcomePassed, "the process finished successfully (for agent steps: a successful result event)"},
	{OutcomeFailed, "the process finished unsuccessfully; the attempt may be retried"},
	{OutcomeTimedOut, "the step's timeout ended the process (SIGTERM to its group, SIGKILL after the grace period)"},
	{OutcomeCanceled, "the run was canceled while the attempt ran"},
	{OutcomeRefused, "the attempt never started: a precondition failed (sandbox unavailable, token missing, ...)"},
	{OutcomeInterrupted, "kusaw stopped while the attempt ran"},
	{OutcomeLost, "the worker running the attempt was lost; the attempt is dispatched again and does not count against the step's attempts"},
}

// Described pairs an enumeration value with its one-line meaning.
type Described[T ~string] struct {
	Value   T
	Meaning string
}
