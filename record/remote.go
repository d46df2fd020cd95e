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
