package client

import (
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// The API's wire types: what serve answers and the client decodes.

// APIErrorBody is the JSON of an API error.
type APIErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// RunDetail is GET /v1/runs/{id}.
type RunDetail struct {
	Run *record.RunRecord `json:"run"`
	// Attempts are the pipeline's own steps' attempts (what decides the
	// run's outcome and ExitCode).
	Attempts []*record.AttemptRecord `json:"attempts"`
	// Helpers are the attempts of the steps a pipeline's shapes ran
	// beside them (fixers, judges, resolve steps), in the order they ran,
	// each with its role; always present, [] when none.
	Helpers  []*record.AttemptRecord `json:"helpers"`
	ExitCode status.ExitCode         `json:"exit_code"`
}

// Health is GET /v1/health.
type Health struct {
	OK          bool      `json:"ok"`
	PID         int       `json:"pid"`
	Queued      int       `json:"queued"`
	Running     int       `json:"running"`
	MaxParallel int       `json:"max_parallel"`
	PeakRunning int       `json:"peak_running"`
	Started     time.Time `json:"started"`
	StateDir    string    `json:"state_dir"`
	Factory     string    `json:"factory"`
	Stopping    bool      `json:"stopping,omitempty"`
	// Cluster is serve's cluster, when it has one: OK is false while
	// serve is not connected to its NATS server.
	Cluster *ClusterHealth `json:"cluster,omitempty"`
	// State is the state folder: OK is false while it takes no writes.
	State *StateHealth `json:"state,omitempty"`
}

// StateHealth is whether serve's state folder takes writes: serve writes
// a test file there (at most every 2 s, and at once after an attempt
// ended with state.write_failed). While it fails, attempts fail with
// state.write_failed; Message names the error and the last such attempt.
type StateHealth struct {
	Dir      string        `json:"dir"`
	Writable bool          `json:"writable"`
	Since    *time.Time    `json:"since,omitempty"` // when the test first failed
	Reason   status.Reason `json:"reason,omitempty"`
	Message  string        `json:"message,omitempty"`
	Fix      string        `json:"fix,omitempty"`
}

// ClusterHealth is serve's connection to NATS and its workers.
type ClusterHealth struct {
	Connected         bool       `json:"connected"`
	NATS              string     `json:"nats"` // the address workers reach
	DisconnectedSince *time.Time `json:"disconnected_since,omitempty"`
	Disconnects       int        `json:"disconnects"`
	WorkersUp         int        `json:"workers_up"`
	WorkersLost       int        `json:"workers_lost"`
	WorkersDraining   int        `json:"workers_draining"`
	WorkersStopped    int        `json:"workers_stopped"`
}

// SubmitRequest is POST /v1/runs.
type SubmitRequest struct {
	Pipeline string            `json:"pipeline"`
	Params   map[string]string `json:"params,omitempty"`
}

// GateRequest is POST /v1/runs/{id}/approve and /reject. Step "" is the
// gate the run waits at; By is heeded only on the Unix socket (the TCP
// listener records the token's name).
type GateRequest struct {
	Step   string `json:"step,omitempty"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// ServeInfo is serve.json: how to reach a running serve.
type ServeInfo struct {
	PID         int       `json:"pid"`
	Socket      string    `json:"socket"`
	Listen      string    `json:"listen,omitempty"`
	Cluster     string    `json:"cluster,omitempty"` // the address workers connect to
	MaxParallel int       `json:"max_parallel"`
	Started     time.Time `json:"started"`
	Factory     string    `json:"factory"`
}

// ClusterToken is POST /v1/cluster/token.
type ClusterToken struct {
	Token   string `json:"token"`
	Addr    string `json:"addr"`
	CA      string `json:"ca_sha256"`
	Expires string `json:"expires_in"`
	// Pools its worker may take; AnyPool: every pool.
	Pools   []string `json:"pools,omitempty"`
	AnyPool bool     `json:"any_pool,omitempty"`
}

// Worker is one line of GET /v1/workers.
type Worker struct {
	Name  string   `json:"name"`
	Pools []string `json:"pools"`
	// AllowedPools are the pools its join token lets it take ("*": every
	// pool).
	AllowedPools  []string   `json:"allowed_pools"`
	Running       int        `json:"running"`
	MaxParallel   int        `json:"max_parallel"`
	Version       string     `json:"version,omitempty"`
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
	Lost          bool       `json:"lost"`
	Draining      bool       `json:"draining,omitempty"`
	Stopped       bool       `json:"stopped,omitempty"`
	Enrolled      time.Time  `json:"enrolled"`
}
