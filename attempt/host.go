package attempt

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"io"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/worktree"
)

// SecretSource resolves secret-store keys when a step's process starts.
type SecretSource interface {
	Get(key string) (string, error)
}

// Host is the machine an attempt runs on: what stays the same from one
// attempt to the next. serve's engine makes one from the factory; a worker
// one from its own state folder and identity.
type Host struct {
	// StateDir is the state folder (leased ports, caches without a path,
	// serve's socket and the cluster's keys, which every sandbox hides).
	StateDir string
	// Repos are the machine's repositories by name; the step's active ones
	// are its worktrees' origin, the others its sandbox hides.
	Repos map[string]string
	// Include are the repos' include globs (repos.NAME.include): files
	// copied from the main checkout into each worktree.
	Include map[string][]string
	// Kusaw is the kusaw binary built-in steps run as.
	Kusaw string
	// KillGrace is the time between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// Key signs the seals of the attempt's events and egress log.
	Key ed25519.PrivateKey
	// Secrets opens the secret source on first use.
	Secrets func() (SecretSource, error)
	// Proxy is the egress proxy leases are opened on (network: allowlist).
	Proxy func() (*egress.Proxy, error)
	// Upstream is sandbox.egress.upstream_proxy with its credentials, nil
	// when the machine has none.
	Upstream func() (*egress.Upstream, error)
	// InjectRootCAs verifies inject upstreams; nil: the system's roots.
	InjectRootCAs *x509.CertPool
	// SandboxCheck is the sandbox backend's check (cached by the caller).
	SandboxCheck func() sandbox.CheckResult
	// Hide are more paths every sandbox hides (a worker's identity).
	Hide []string
	// OnEvent is called for every event, after it is written.
	OnEvent func(record.Event)
}

// Shape is what a pipeline's shape asks of one attempt (docs/pipelines.md).
type Shape struct {
	From     map[string]string // repo → branch the worktree starts from (default: the run branch)
	Keep     bool              // passing does not move the run branch (its work is merged or chosen later)
	Env      map[string]string // added to the process's environment and its record
	ReadOnly []string          // paths the sandbox shows read-only
	Note     string            // added to an agent step's prompt
	Merge    map[string]string // repo → commit merged into the worktree before the step (resolve)
	Siblings []string          // branches of candidates running beside this one
	Handoff  string            // the previous attempt's handoff folder (in env, note and readOnly)
	// Candidates are a judge's: the passing candidates' commits, which
	// the attempt exports where it runs (exportCandidates).
	Candidates []record.SpecCandidate
	// Role is a helper's part in the shape (fixer, judge, resolve).
	Role *record.AttemptRole
	// Resume continues the agent session of the run's previous attempt
	// of the step (continue_session); nil: a new session.
	Resume *SessionResume
	// KeepSession keeps the agent's session files when the attempt ends
	// (SessionDir), for the next attempt to continue (continue_session).
	KeepSession bool
}

// SessionResume is the session an agent attempt continues.
type SessionResume struct {
	SessionID string // the previous attempt's result's session id
	// ConfigDir is the previous attempt's per-attempt provider folder,
	// whose session files the new attempt gets a copy of.
	ConfigDir string
}

// Job is one attempt's place in its run: where its records go, the run's
// branches, the shape around it and what its caller wants to hear.
type Job struct {
	// Dir is the attempt's folder.
	Dir string
	// Repos are the run's repos as the run knows them (run branch, the
	// commit the run started from, the branch's tip).
	Repos []record.RunRepo
	// NewBranches: the run branches do not exist on this machine yet;
	// each is made at its tip together with the attempt's worktree (one
	// git process for both: a worker's attempt).
	NewBranches bool
	// Volatile: the records are written whole but without fsync; the
	// folder goes with the attempt and another machine keeps the records
	// that count (a worker's attempt: fsync would only slow its start).
	Volatile bool
	// RunBranchElsewhere: the run branch that counts is another
	// machine's (serve's, which moves it when it takes the result: a
	// worker's attempt), so the stand-in here stays where it was made; a
	// fast-forward check and a git process per attempt would be thrown
	// away, and branch.advanced is serve's event.
	RunBranchElsewhere bool
	Shape              Shape
	// Redact is the run's redactor: secrets the attempt resolves are added
	// to it. Nil: the attempt's own.
	Redact *Redactor
	// OpenRepo opens a repository (the run's cache of them); nil:
	// worktree.OpenRepo.
	OpenRepo func(name, path string) (*worktree.Repo, error)
	Options
	// Interrupted reports whether a cancel is serve stopping: the attempt
	// is recorded interrupted, not canceled.
	Interrupted func() bool
	// Refused hears of a sandbox refusal (kusaw run's exit status).
	Refused func(*status.Error)
	// Refusal hears of each connection the egress proxy refused.
	Refusal func(egress.Decision)
	// Advanced hears of each run branch the passing attempt moved.
	Advanced func(repo, sha string)
}

// Options are a caller's own wishes for an attempt, beside its spec: kusaw
// sandbox exec streams the output, doctor adds its loopback server to the
// allowlist.
type Options struct {
	// Stdout and Stderr also receive the processes' output.
	Stdout, Stderr io.Writer
	// ExtraAllow are allowlist entries of this attempt only, with their
	// own origin (they are not part of the step).
	ExtraAllow []config.AllowedHost
}

func (j *Job) repo(name string) *record.RunRepo {
	for i := range j.Repos {
		if j.Repos[i].Name == name {
			return &j.Repos[i]
		}
	}
	return nil
}

func (j *Job) openRepo(name, path string) (*worktree.Repo, error) {
	if j.OpenRepo != nil {
		return j.OpenRepo(name, path)
	}
	return worktree.OpenRepo(path)
}

func (h *Host) secrets() (SecretSource, error) {
	if h.Secrets == nil {
		return nil, errors.New("this machine has no secret store")
	}
	return h.Secrets()
}

func (h *Host) upstream() (*egress.Upstream, error) {
	if h.Upstream == nil {
		return nil, nil
	}
	return h.Upstream()
}

// DefaultKillGrace is the time between SIGTERM and SIGKILL.
const DefaultKillGrace = 10 * time.Second

func (h *Host) sandboxCheck() sandbox.CheckResult {
	if h.SandboxCheck == nil {
		return sandbox.CachedCheck()
	}
	return h.SandboxCheck()
}
