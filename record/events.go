package record

import (
	"encoding/json"
	"time"
)

// Event types (docs/architecture.md, "The life of an attempt"). Each has a
// row in EventTypes (eventtypes.go): who may write it, whether it seals.
const (
	EvRunStarted      = "run.started"
	EvRunFinished     = "run.finished"
	EvStepStarted     = "step.started"
	EvStepFinished    = "step.finished"
	EvAttemptStarted  = "attempt.started"
	EvAttemptFinished = "attempt.finished"
	EvWorktreeCreated = "worktree.created"
	EvSetupFinished   = "setup.finished"
	EvProcessStarted  = "process.started"
	EvProcessExited   = "process.exited"
	EvSandboxPlan     = "sandbox.plan"
	EvCommitted       = "worktree.committed"
	EvBranchAdvanced  = "branch.advanced"
	EvEgressBlocked   = "egress.blocked"
	EvEgressSummary   = "egress.summary"
	// EvEgressWouldRefuse: network: audit admitted a host the allowlist
	// lacks (capped per attempt like egress.blocked).
	EvEgressWouldRefuse = "egress.would_refuse"
	EvRepoDirty         = "repo.dirty"
	EvCancelRequested   = "run.cancel_requested"
	EvRefsRestored      = "worktree.refs_restored"
	// EvLeftBehind names one thing a step left in a git folder that kusaw
	// refused or removed before its own git ran there (a link, a FIFO, a
	// symbolic ref): the path, what it was and what kusaw did.
	EvLeftBehind = "worktree.left_behind"
	// EvRefStore: the sandbox's private ref store was made (how many refs,
	// how long it took).
	EvRefStore = "worktree.ref_store"
	// EvWriteLayer: whether the step writes a worktree through a write
	// layer (repos.NAME.write_layer), and why not when it was asked for;
	// EvLayerApplied: the layer moved into the tree after the step (how
	// many paths, how long), or why it could not be.
	EvWriteLayer   = "worktree.write_layer"
	EvLayerApplied = "worktree.layer_applied"
	// EvSetupWhere says where an attempt's setup runs and why: on the host,
	// or inside the attempt's sandbox because a step of the run may have
	// written the commit it runs on.
	EvSetupWhere    = "setup.placed"
	EvDeliverMerged = "deliver.merged"
	EvDeliverPushed = "deliver.pushed"
	EvDeliverPull   = "deliver.pull_request"
	EvIncluded      = "worktree.included"
	EvCacheWaiting  = "cache.waiting"
	EvPortsLeased   = "ports.leased"
	EvDeliverFailed = "deliver.failed"

	// Pipeline shapes (docs/pipelines.md).
	EvStepRetry          = "step.retry"           // after a failed attempt: whether another runs, and why
	EvFixStarted         = "fix.started"          // an on_failure fixer runs on a failed attempt's branch
	EvFixFinished        = "fix.finished"         // where the next attempt starts
	EvGroupStarted       = "group.started"        // a parallel group's members start from one tip
	EvGroupCanceling     = "group.canceling"      // a member failed: its running siblings are stopped
	EvGroupMerged        = "group.merged"         // the members' commits merged into the run branch
	EvMergeConflict      = "group.merge_conflict" // a member's commit conflicts: files named
	EvMergeResolved      = "group.merge_resolved" // a resolve step completed a conflicted merge
	EvCandidatesSelected = "candidates.selected"  // which candidate was kept, and why
	EvHeadsMoved         = "branch.merged"        // the run branch moved to merged or chosen work
	// EvStoppedAfterResult: the agent printed its result but did not exit
	// within its exit grace, so kusaw ended it; the result decides.
	EvStoppedAfterResult = "process.stopped_after_result"
	// EvLimitReached: a step's or pipeline's limit was crossed.
	EvLimitReached = "limit.reached"
	// EvClusterClaimed: a worker claimed a dispatched attempt (its name and
	// fencing token); EvClusterReattached: a restarted serve waits again for
	// an attempt that went on on its worker while serve was down.
	EvClusterClaimed    = "cluster.claimed"
	EvClusterReattached = "cluster.reattached"
	// EvClusterEgressLog is serve's verdict on a worker's egress.log (a
	// refused one fails the attempt); EvClusterObjectRefused names an
	// object of a worker's result serve did not take (its SHA-256 is not
	// the one the result names).
	EvClusterEgressLog     = "cluster.egress_log"
	EvClusterObjectRefused = "cluster.object_refused"
)

// Event is one line of an events.jsonl file.
type Event struct {
	Seq     int64          `json:"seq"`
	TS      time.Time      `json:"ts"`
	Run     string         `json:"run"`
	Step    string         `json:"step,omitempty"`
	Attempt int            `json:"attempt,omitempty"`
	Type    string         `json:"type"`
	Data    map[string]any `json:"data,omitempty"`
}

// Readers take an event's data through these rather than by type
// assertion: a number is an int or int64 in the process that emitted the
// event and a float64 (or json.Number) once it went through JSON, so an
// assertion such as Data["of"].(int) fails silently on one of the paths.

// Str is data key k as a string: "" when absent or not a string.
func (ev Event) Str(k string) string {
	s, _ := ev.Data[k].(string)
	return s
}

// Int is data key k as an integer, whichever way it arrived; ok is false
// when it is absent or not a number.
func (ev Event) Int(k string) (int64, bool) { return number(ev.Data[k]) }

// Bool is data key k as a bool: false when absent or not a bool.
func (ev Event) Bool(k string) bool {
	b, _ := ev.Data[k].(bool)
	return b
}

// number reads a JSON or Go number as an int64.
func number(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case uint64:
		return int64(x), true
	case uint32:
		return int64(x), true
	case float64:
		return int64(x), true
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, true
		}
		f, err := x.Float64()
		return int64(f), err == nil
	}
	return 0, false
}
