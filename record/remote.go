package record

// RemoteJob is what serve's engine hands the cluster for one attempt: where
// its records go on serve and how to write its events (serve stays their
// only signer). Plain data and callbacks: the cluster never imports the
// engine (docs/architecture.md, "The cluster").
type RemoteJob struct {
	// Dir is the attempt's folder on serve: logs and artifacts land here.
	Dir string
	// Repos are serve's repositories by name: bundles are made from them
	// and the attempt's commits imported into them (no ref moves).
	Repos map[string]string
	// Emit writes one event into the attempt's sealed events.jsonl.
	Emit func(typ string, data map[string]any)
	// Secret reads a secret-store key on serve (sealed to the worker that
	// runs the attempt, never sent in clear).
	Secret func(key string) (string, error)
	// Claimed records who took the attempt (its attempt.json names the
	// worker and token at once, so a restarted serve can re-attach).
	Claimed func(worker string, token uint64)
}

// RemoteResult is how a remote attempt ended.
type RemoteResult struct {
	// Lost: the worker stopped answering; the attempt is dispatched again.
	Lost    bool
	Message string
	Worker  string
	Token   uint64
	// Record is the worker's attempt record (outcome, processes,
	// allowlist); its paths are the worker's.
	Record *AttemptRecord
	// Heads are the commits the attempt ended at, by repo, already in
	// serve's repositories (imported and re-hashed).
	Heads map[string]string
}

// WorkerEventsFile is the worker's own sealed copy of a remote attempt's
// events, kept beside serve's events.jsonl (never in its place).
const WorkerEventsFile = "worker-events.jsonl"

// ResultFile reports whether a worker's result may bring a file of that
// name into a remote attempt's folder: its stdout and stderr (one pair
// per repo of a step run once in each, repos), the set-up log, its own
// copy of the events and the egress log (which serve keeps only once it
// verifies). An allow list: every record serve writes there
// (events.jsonl, attempt.json, spec.json and whatever comes later) is
// refused because it is not named here, as is any path.
func ResultFile(name string, repos []string) bool {
	switch name {
	case StdoutFile, StderrFile, SetupLogFile, EgressLogFile, WorkerEventsFile:
		return true
	}
	for _, r := range repos {
		if ValidName(r) && (name == "stdout-"+r+".log" || name == "stderr-"+r+".log") {
			return true
		}
	}
	return false
}
