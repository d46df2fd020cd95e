package record

import (
	"fmt"
	"path/filepath"
)

// File and folder names of the state directory (docs/architecture.md, "Records").
const (
	RunsDir       = "runs"
	ActiveDir     = "active" // runs/active/<id>: runs whose owner may still be alive
	RunFile       = "run.json"
	EventsFile    = "events.jsonl"
	AttemptFile   = "attempt.json"
	EgressLogFile = "egress.log"
	StdoutFile    = "stdout.log"
	StderrFile    = "stderr.log"
	SetupLogFile  = "setup.log"
	ArtifactsDir  = "artifacts"
	TmpDir        = "tmp"
	WorktreesDir  = "worktrees"
	ObjectsDir    = "objects"    // objects/<process>: each sandbox's private git objects, imported at commit
	RefStoreDir   = "refstore"   // refstore/<repo>: the sandbox's private refs/ and logs/ (Linux), the attempt branch taken from it at commit
	LeaseNoteFile = "lease.path" // the temp folder of the lease socket, when the attempt folder's path is too long for a socket
	LockFile      = "lock"
	CancelFile    = "cancel"
	StepsDir      = "steps"
	PinFile       = "pinned" // kusaw runs pin: retention keeps the run
	// GCPrefix names a run folder retention is removing (renamed first, so
	// a half-removed run is never listed): not a valid run id.
	GCPrefix = ".gc-"

	// Serve's files.
	ServeSocketDir  = "serve"            // holds the socket; hidden from every sandbox
	ClusterDir      = "cluster"          // serve's CA, identity, workers, JetStream store; hidden from every sandbox
	ServeSocketFile = "serve/serve.sock" // the API's Unix socket (mode 0600)
	ServeInfoFile   = "serve.json"       // pid, socket, listen address, limits
	ServedFile      = "served"           // in a run's folder: serve queued it (resume candidates)
	ParamsFile      = "params.json"      // a run's submitted parameters
)

// RunDir is runs/<id> under a state directory.
func RunDir(stateDir, id string) string { return filepath.Join(stateDir, RunsDir, id) }

// AttemptDir is steps/<step>/<n> under a run's folder.
func AttemptDir(runDir, step string, n int) string {
	return filepath.Join(runDir, StepsDir, step, fmt.Sprint(n))
}
