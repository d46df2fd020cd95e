package cluster

import (
	"encoding/json"
	"time"

	"github.com/kusaw/kusaw/record"
)

// Work is the message on kusaw.work.<pool>: data only, never a path of
// serve (docs/cluster.md).
type Work struct {
	Spec json.RawMessage `json:"spec"` // record.AttemptSpec
	// Inputs name, per repo, the object holding a bundle of the base.
	Inputs map[string]string `json:"inputs"`
	// More are bundles of the other commits the attempt reads (a resolve's
	// merge, a judge's candidates: record.AttemptSpec.Needs).
	More      []Input   `json:"more,omitempty"`
	Published time.Time `json:"published"`
}

// Input names the object holding a bundle of one commit of a repo.
type Input struct {
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
	Object string `json:"object"`
}

// Object is the object holding a bundle of commit of repo ("" when serve
// sent none: every worker of the pool held it).
func (w *Work) Object(repo, commit string, base bool) string {
	if base {
		return w.Inputs[repo]
	}
	for _, in := range w.More {
		if in.Repo == repo && in.Commit == commit {
			return in.Object
		}
	}
	return ""
}

// Event is one event of a remote attempt, streamed live to serve, which
// writes it into the attempt's sealed events.jsonl.
type Event struct {
	Attempt string         `json:"attempt"`
	Worker  string         `json:"worker"`
	Token   uint64         `json:"token"`
	TS      time.Time      `json:"ts"`
	Type    string         `json:"type"`
	Data    map[string]any `json:"data,omitempty"`
}

// Result is a worker's report of a finished attempt.
type Result struct {
	Attempt string          `json:"attempt"`
	Worker  string          `json:"worker"`
	Token   uint64          `json:"token"`
	Record  json.RawMessage `json:"record,omitempty"` // record.AttemptRecord, the worker's
	Error   string          `json:"error,omitempty"`  // the worker could not run it
	// Heads are the commits the attempt ended at; Bundles the objects
	// carrying them (against the base); Files the logs and the artifacts
	// (a tar), by name.
	Heads   map[string]string `json:"heads,omitempty"`
	Bundles map[string]string `json:"bundles,omitempty"`
	Files   map[string]string `json:"files,omitempty"`
	// Digests are the SHA-256 (hex) of every object above, by object
	// name, as the worker uploaded it: any worker may write the object
	// store, but only the holder sends this result, so serve refuses an
	// object that changed after its upload.
	Digests map[string]string `json:"digests,omitempty"`
	// HandedBack, when set, says why the worker gives the attempt back
	// unfinished (it drained out of time, or was stopped at once): serve
	// ends it lost and dispatches it again, not counted against its step.
	HandedBack string `json:"handed_back,omitempty"`
}

// Control is serve's request to one worker, on its control subject.
type Control struct {
	// Drain: take no new attempts, let the running ones finish within
	// Timeout (0: the worker's drain_timeout), then exit.
	Drain   bool          `json:"drain,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Heartbeat is a worker's entry in the workers bucket, put every second.
type Heartbeat struct {
	Name        string    `json:"name"`
	Pools       []string  `json:"pools"`
	MaxParallel int       `json:"max_parallel"`
	Running     []Running `json:"running"`
	Version     string    `json:"version,omitempty"`
	Started     time.Time `json:"started"` // the worker process's start: a restart shows here
	// Have are, per repo, commits the worker's cache holds (the latest
	// first, a few dozen): serve bundles a base against what every live
	// worker of the pool has.
	Have map[string][]string `json:"have,omitempty"`
	TS   time.Time           `json:"ts"`
	// Draining: the worker takes no new attempts (it is stopping);
	// Stopped: its last heartbeat, it stopped on purpose.
	Draining bool `json:"draining,omitempty"`
	Stopped  bool `json:"stopped,omitempty"`
}

// Running is an attempt a worker holds, with its token.
type Running struct {
	Attempt string `json:"attempt"`
	Token   uint64 `json:"token"`
}

// SecretsRequest asks serve for an attempt's secrets; SecretsReply carries
// them sealed to the asking worker's curve key (a JSON map once opened).
type SecretsRequest struct {
	Attempt string `json:"attempt"`
	Worker  string `json:"worker"`
	Token   uint64 `json:"token"`
}

type SecretsReply struct {
	Sealed []byte `json:"sealed,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Files a result carries besides bundles.
const (
	ArtifactsTar = "artifacts.tar"
	WorkerEvents = record.WorkerEventsFile // the worker's own sealed copy
)

// BundleRequest asks serve for a full bundle of a repo's base, or of
// another commit the attempt reads: the worker lacks a commit the
// incremental bundle needs (its cache was lost).
type BundleRequest struct {
	Attempt string `json:"attempt"`
	Worker  string `json:"worker"`
	Token   uint64 `json:"token"`
	Repo    string `json:"repo"`
	Commit  string `json:"commit,omitempty"` // "": the repo's base
}

// BundleReply names the object holding the full bundle.
type BundleReply struct {
	Object string `json:"object,omitempty"`
	Error  string `json:"error,omitempty"`
}
