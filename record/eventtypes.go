package record

import (
	"fmt"
	"strings"
)

// Event types that have no other home: serve's side of a remote attempt,
// and the attempt's own events that were named only where they are emitted.
const (
	EvProviderProbe  = "provider.probe"  // which binary of the provider runs, and its version
	EvProviderConfig = "provider.config" // Cursor's per-attempt config folder

	EvWorktreeRemoveFailed = "worktree.remove_failed"
	// EvSandboxCleanup: the sandbox's cleanup could not undo something
	// (a stand-in it could not remove, a login it could not carry back).
	EvSandboxCleanup = "sandbox.cleanup_failed"
	// EvSandboxCredentials: a credentials file the step changed in its
	// login copy, carried back to the user's or not, and why.
	EvSandboxCredentials = "sandbox.credentials"

	EvClusterDispatched       = "cluster.dispatched"
	EvClusterBundle           = "cluster.bundle"
	EvClusterLost             = "cluster.lost"
	EvClusterFenced           = "cluster.fenced"
	EvClusterArtifactsRefused = "cluster.artifacts_refused"
	// EvClusterEventRefused: serve did not write an event a worker sent,
	// of a type a worker may not send (serve's own, or one kusaw does not
	// know).
	EvClusterEventRefused = "cluster.event_refused"
)

// Writer says who may write an event type into a record.
type Writer string

const (
	// WriterServe: only the kusaw that keeps the records (serve, or kusaw
	// run) writes it; a cluster worker's event of this type is refused.
	WriterServe Writer = "serve"
	// WriterWorker: only a cluster worker sends it.
	WriterWorker Writer = "worker"
	// WriterBoth: written by whoever runs the attempt: kusaw itself, or
	// the worker the attempt ran on.
	WriterBoth Writer = "both"
)

// EventType is one row of the event table.
type EventType struct {
	Name   string
	Writer Writer
	// Checkpoint: the event changes a run's or an attempt's state, so its
	// log is sealed at once after it (Checkpoint), not within chainlog's
	// seal interval.
	Checkpoint bool
	Doc        string
}

// EventTypes lists every event type kusaw writes, in the order of a run's
// life. A type emitted anywhere must have a row here (a test scans the
// sources); docs/records.md's list is generated from it (make docs); and a
// worker may send serve only the types marked worker or both
// (WorkerMaySend).
var EventTypes = []EventType{
	// The run and its steps.
	{EvRunStarted, WriterServe, true, "the run began: its pipeline and steps"},
	{EvRepoDirty, WriterServe, false, "a repository's main checkout has uncommitted changes, which the run leaves alone"},
	{EvStepStarted, WriterServe, true, "a step of the pipeline began"},
	{EvAttemptStarted, WriterServe, true, "an attempt began: its number, of how many, the sandbox mode, a helper's role"},

	// The attempt, as its executor runs it (here or on a worker).
	{EvWorktreeCreated, WriterBoth, false, "a repository's worktree for the attempt, on its attempt branch"},
	{EvIncluded, WriterBoth, false, "the gitignored files copied into a worktree"},
	{EvCacheWaiting, WriterBoth, false, "the attempt waited for another to finish with a cache"},
	{EvPortsLeased, WriterBoth, false, "the host ports given to the step as KUSAW_PORT_n"},
	{EvSetupWhere, WriterBoth, false, "where the attempt's setup runs (on the host or in its sandbox) and why"},
	{EvSetupFinished, WriterBoth, false, "the setup commands ended: their outcome and duration"},
	{EvRefStore, WriterBoth, false, "the sandbox's private ref store was made: how many refs, how long it took"},
	{EvWriteLayer, WriterBoth, false, "whether the step writes a worktree through its write layer (repos.NAME.write_layer: overlay), and why not"},
	{EvLayerApplied, WriterBoth, false, "the write layer was moved into the worktree after the step: the paths it changed, how long it took, or why it could not be"},
	{EvSandboxPlan, WriterBoth, false, "the sandbox plan: every path decision with its reason"},
	{EvProviderProbe, WriterBoth, false, "which binary of the agent's provider runs, and its version"},
	{EvProviderConfig, WriterBoth, false, "Cursor's per-attempt config folder and its network"},
	{EvProcessStarted, WriterBoth, true, "a process of the step started: pid, argv, working folder"},
	{EvProviderInit, WriterBoth, false, "the agent's session: id, model, working folder, permission mode, where the key came from"},
	{EvProviderTool, WriterBoth, false, "a tool call of the agent, when it starts and when it completes"},
	{EvProviderText, WriterBoth, false, "a message of the agent (cut to 2000 bytes)"},
	{EvProviderThinking, WriterBoth, false, "the agent's thinking, one event per phase"},
	{EvProviderUsage, WriterBoth, false, "the agent's running token totals, which limits are checked against"},
	{EvProviderRetry, WriterBoth, false, "the agent's CLI retries a failed API call"},
	{EvProviderResult, WriterBoth, false, "the agent's result: error flag, turns, duration, usage, cost, final text"},
	{EvLimitReached, WriterBoth, false, "a step's or pipeline's limit was crossed: the limit, its maximum and what was used"},
	{EvStoppedAfterResult, WriterBoth, false, "the agent printed its result but did not exit within its exit grace, so kusaw ended it"},
	{EvEgressBlocked, WriterBoth, false, "the proxy refused a connection (the first 50 of an attempt; the rest are counted in the summary)"},
	{EvEgressWouldRefuse, WriterBoth, false, "network: audit admitted a host the allowlist lacks (at most 50 per attempt)"},
	{EvProcessExited, WriterBoth, true, "a process of the step ended: exit code or signal, duration"},
	{EvEgressSummary, WriterBoth, true, "per host: connections, bytes up and down, refusals"},
	{EvRefsRestored, WriterBoth, false, "a step moved a branch beside its own; kusaw put it back"},
	{EvLeftBehind, WriterBoth, false, "something a step left in a git folder (a link, a FIFO, a symbolic ref) that kusaw refused or removed"},
	{EvWorktreeRemoveFailed, WriterBoth, false, "an attempt's worktree could not be removed"},
	{EvSandboxCredentials, WriterBoth, false, "a credentials file the step changed in its login copy: carried back to the user's (a refresh: only the token fields changed, the token host reached) or the user's kept, and why"},
	{EvSandboxCleanup, WriterBoth, false, "the sandbox's cleanup could not do something: remove a stand-in, write a refreshed login back"},

	// The attempt's end, on serve's repositories.
	{EvCommitted, WriterServe, true, "what the step left in a worktree, committed on the attempt branch"},
	{EvBranchAdvanced, WriterServe, true, "a passed attempt moved the run branch to its commit"},
	{EvAttemptFinished, WriterServe, true, "the attempt ended: outcome, reason, message, duration"},

	// An attempt run on a cluster worker: serve's side.
	{EvClusterDispatched, WriterServe, false, "serve offered the attempt to a pool's workers"},
	{EvClusterBundle, WriterServe, false, "the git bundle serve sent for a repository: commit, bytes, incremental or full"},
	{EvClusterClaimed, WriterServe, true, "a worker claimed the attempt: its name and fencing token"},
	{EvClusterReattached, WriterServe, true, "a restarted serve waits again for an attempt that went on on its worker"},
	{EvClusterLost, WriterServe, false, "the holding worker stopped answering; the attempt is offered again"},
	{EvClusterFenced, WriterServe, false, "a result or claim from a worker that no longer holds the attempt, refused"},
	{EvClusterEventRefused, WriterServe, false, "an event from the worker of a type a worker may not send, not written (once per type)"},
	{EvClusterEgressLog, WriterServe, false, "serve's verdict on the worker's egress.log: verified, or refused and why"},
	{EvClusterObjectRefused, WriterServe, false, "a log or object of the worker's result that changed in the store after its upload, not taken"},
	{EvClusterArtifactsRefused, WriterServe, false, "the worker's artifacts, not taken, and why"},

	// Pipeline shapes (docs/pipelines.md).
	{EvStepRetry, WriterServe, false, "after a failed attempt: whether another runs, and why"},
	{EvFixStarted, WriterServe, false, "an on_failure fixer runs on a failed attempt's branch"},
	{EvFixFinished, WriterServe, false, "the fixer ended: where the next attempt starts"},
	{EvGroupStarted, WriterServe, false, "a parallel group's members start from one tip"},
	{EvGroupCanceling, WriterServe, false, "a member failed: its running siblings are stopped"},
	{EvMergeConflict, WriterServe, false, "a member's commit conflicts with the others: the files"},
	{EvMergeResolved, WriterServe, false, "a resolve step completed a conflicted merge"},
	{EvGroupMerged, WriterServe, true, "the members' commits merged into the run branch"},
	{EvCandidatesSelected, WriterServe, true, "which candidate was kept, and why"},
	{EvHeadsMoved, WriterServe, true, "the run branch moved to merged or chosen work"},
	{EvGateWaiting, WriterServe, true, "the run waits at a gate: message, approvers, deadline, the commands"},
	{EvGateApproved, WriterServe, true, "a gate was approved: by whom, when, why"},
	{EvGateRejected, WriterServe, true, "a gate was rejected (timed_out for a timeout): by whom, when, why"},
	{EvStepFinished, WriterServe, true, "a step ended: its outcome after how many attempts"},

	// The run's end and after.
	{EvCancelRequested, WriterServe, true, "someone asked the run to stop"},
	{EvRunFinished, WriterServe, true, "the run ended: state, reason, message"},
	{EvNotifyDelivered, WriterServe, false, "a webhook took a notification (also in notify.jsonl)"},
	{EvNotifyFailed, WriterServe, false, "a notification's try failed; final when no more follow (also in notify.jsonl)"},
	{EvDeliverMerged, WriterServe, false, "delivery merged the run branch into its target"},
	{EvDeliverPushed, WriterServe, false, "delivery pushed the run branch"},
	{EvDeliverPull, WriterServe, false, "delivery opened a pull request"},
	{EvDeliverFailed, WriterServe, false, "a delivery step failed; the run stays succeeded"},
}

var eventTypes = func() map[string]EventType {
	m := make(map[string]EventType, len(EventTypes))
	for _, t := range EventTypes {
		m[t.Name] = t
	}
	return m
}()

// LookupEventType returns the table's row for an event type.
func LookupEventType(name string) (EventType, bool) {
	t, ok := eventTypes[name]
	return t, ok
}

// Checkpoint reports whether an event of this type changes a run's or an
// attempt's state: its log is sealed at once after it, rather than within
// chainlog's seal interval, so the state a record claims is never unsigned.
// The frequent events (provider output, egress refusals) wait for the
// interval.
func Checkpoint(typ string) bool { return eventTypes[typ].Checkpoint }

// WorkerMaySend reports whether a cluster worker may put an event of this
// type into the record serve keeps and signs for a remote attempt: only
// the types the table marks worker or both. Anything else (serve's own
// verdicts, the attempt's start and end, commits and branches on serve's
// repositories, what belongs to the run, a type kusaw does not know) is
// refused: a worker that sent one would put words in serve's mouth.
func WorkerMaySend(typ string) bool {
	w := eventTypes[typ].Writer
	return w == WriterWorker || w == WriterBoth
}

// EventTypesMarkdown renders docs/records.md's list of event types.
func EventTypesMarkdown() string {
	var b strings.Builder
	b.WriteString("<!-- Generated from record.EventTypes by `make docs`; do not edit. A test fails when this list is stale. -->\n\n")
	b.WriteString("*Written by*: `serve` only by the kusaw that keeps the records (serve, or `kusaw run` on its own), never taken from a cluster worker; ")
	b.WriteString("`both` by whoever runs the attempt: kusaw, or the worker it ran on (a worker's events carry `worker`); `worker` only by a worker. ")
	b.WriteString("*Sealed at once*: the log is signed right after the event ([Tamper evidence](#tamper-evidence)).\n\n")
	b.WriteString("| type | written by | sealed at once | what it records |\n|---|---|---|---|\n")
	for _, t := range EventTypes {
		seal := ""
		if t.Checkpoint {
			seal = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", t.Name, t.Writer, seal, strings.ReplaceAll(t.Doc, "|", `\|`))
	}
	return b.String()
}
