package record

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/status"
)

// Owner identifies the process that executes a run; it holds an exclusive
// flock on the run's lock file for as long as it lives.
type Owner struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host,omitempty"`
	Start time.Time `json:"start"`
}

// RunRepo is one repo of a run: where it started and its run branch.
type RunRepo struct {
	Name    string   `json:"name"`
	Path    string   `json:"path"`
	Base    string   `json:"base,omitempty"`
	BaseSHA string   `json:"base_sha"`
	Branch  string   `json:"branch"`
	HeadSHA string   `json:"head_sha,omitempty"`
	Dirty   []string `json:"uncommitted_in_checkout,omitempty"`
}

// StepResult is one step's line in run.json.
type StepResult struct {
	ID       string         `json:"id"`
	Outcome  status.Outcome `json:"outcome,omitempty"`
	Reason   status.Reason  `json:"reason,omitempty"`
	Attempts int            `json:"attempts"` // attempts made in this occurrence of the step
	// FirstAttempt is the number of its first attempt: above 1 when the
	// step appeared earlier in the pipeline, or the run was resumed.
	FirstAttempt int        `json:"first_attempt,omitempty"`
	Started      *time.Time `json:"started,omitempty"`
	Finished     *time.Time `json:"finished,omitempty"`
	// Group numbers the parallel group the step ran in (1 for the
	// pipeline's first group); 0 when it ran alone.
	Group int `json:"group,omitempty"`
	// Candidates is how many candidates ran at once; Chosen is the
	// attempt number kept (0: none passed).
	Candidates int `json:"candidates,omitempty"`
	Chosen     int `json:"chosen,omitempty"`
	// Gate is the decision on the step's gate; an approval stays through a
	// resume, so a restarted run does not ask again.
	Gate *GateDecision `json:"gate,omitempty"`
	// Usage sums the step's attempts' usage; absent when none reported any.
	Usage *Usage `json:"usage,omitempty"`
}

// HeadMove is one planned move of a run branch to merged or chosen work.
// It is written to run.json before the branch moves, so a restarted run
// finishes the move instead of doing the work (or the merge) twice.
type HeadMove struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	From   string `json:"from"`
	To     string `json:"to"`
}

// RunRecord is run.json.
type RunRecord struct {
	ID       string          `json:"id"`
	Pipeline string          `json:"pipeline"`
	Factory  string          `json:"factory"`
	State    status.RunState `json:"state"`
	Reason   status.Reason   `json:"reason,omitempty"`
	Message  string          `json:"message,omitempty"`
	Fix      string          `json:"fix,omitempty"`
	Created  time.Time       `json:"created"`
	Started  *time.Time      `json:"started,omitempty"`
	Finished *time.Time      `json:"finished,omitempty"`
	Owner    *Owner          `json:"owner,omitempty"`
	Repos    []RunRepo       `json:"repos"`
	Steps    []StepResult    `json:"steps"`
	// EventsSeal names the last seal of the run's events.jsonl (written
	// when the run's events close), so a log cut back to an earlier seal
	// (a resumed run's first final seal) does not verify.
	EventsSeal *chainlog.SealRef `json:"events_seal,omitempty"`
	// Pending are branch moves decided but maybe not yet made (a crash
	// between the two); empty once made.
	Pending []HeadMove `json:"pending_moves,omitempty"`
	// Gate is the gate the run waits at (state waiting).
	Gate *GateWait `json:"gate,omitempty"`
	// Refusals counts egress refusals over the run, for the end of kusaw run.
	EgressBlocked int `json:"egress_blocked,omitempty"`
	// EgressRefused names the first 20 refused hosts, one line each
	// ("step attempt n: host:port refused: why").
	EgressRefused []string `json:"egress_refused,omitempty"`
	// Delivery is what pipelines.<name>.deliver did after the run succeeded.
	Delivery *Delivery `json:"delivery,omitempty"`
	// Usage sums every attempt's usage; absent when none reported any.
	Usage *Usage `json:"usage,omitempty"`
	// Trigger is the forge event or schedule that started the run.
	Trigger *Trigger `json:"trigger,omitempty"`
	// Continues is the run whose branches this one started from (a
	// follow-up after a review); Thread is the first run of that chain,
	// whose pushed branch and pull request every follow-up updates.
	Continues string `json:"continues,omitempty"`
	Thread    string `json:"thread,omitempty"`
}

// WorktreeRecord is one worktree of an attempt.
type WorktreeRecord struct {
	Repo     string `json:"repo"`
	RepoPath string `json:"repo_path"`
	Path     string `json:"path"`
	GitDir   string `json:"git_dir,omitempty"`
	Branch   string `json:"branch"`
	BaseSHA  string `json:"base_sha,omitempty"`
	HeadSHA  string `json:"head_sha,omitempty"`
	Changed  bool   `json:"changed,omitempty"`
	Removed  bool   `json:"removed,omitempty"`
}

// ProcessRecord is one process of an attempt (per_repo: one per repo).
type ProcessRecord struct {
	Repos   []string          `json:"repos"`
	Dir     string            `json:"dir"`
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env"` // the step's own env; secrets as <secret>
	Sandbox json.RawMessage   `json:"sandbox_plan,omitempty"`
	PID     int               `json:"pid,omitempty"`
	// Start tells this process from a later one with the same pid
	// (internal/proc.StartID); recovery ends the process group it led
	// only when it matches.
	Start   string         `json:"start,omitempty"`
	Exit    *int           `json:"exit_code,omitempty"`
	Signal  string         `json:"signal,omitempty"`
	Outcome status.Outcome `json:"outcome,omitempty"`
	Reason  status.Reason  `json:"reason,omitempty"`
	Message string         `json:"message,omitempty"`
	Stdout  string         `json:"stdout"`
	Stderr  string         `json:"stderr"`
	Result  any            `json:"provider_result,omitempty"`
	// Probe is what kusaw found of the provider's CLI (agent steps).
	Probe *ProviderProbe `json:"provider_probe,omitempty"`
}

// ProviderProbe is the agent CLI an attempt ran.
type ProviderProbe struct {
	Path    string `json:"path"`
	Version string `json:"version,omitempty"`
}

// AttemptRecord is attempt.json: the resolved configuration of one attempt
// and how it ended.
type AttemptRecord struct {
	Run        string           `json:"run"`
	Step       string           `json:"step"`
	Number     int              `json:"attempt"`
	Of         int              `json:"of"`
	Kind       config.StepKind  `json:"kind"`
	Provider   string           `json:"provider,omitempty"`
	Builtin    string           `json:"builtin,omitempty"`
	Mode       config.Mode      `json:"mode"`
	ModeOrigin string           `json:"mode_origin"`
	Network    config.Network   `json:"network"`
	Allowlist  []AllowedHost    `json:"allowlist,omitempty"`
	Egress     *EgressTotals    `json:"egress,omitempty"`
	Timeout    string           `json:"timeout,omitempty"`
	Setup      [][]string       `json:"setup,omitempty"`
	Worktrees  []WorktreeRecord `json:"worktrees"`
	Processes  []ProcessRecord  `json:"processes"`
	Outcome    status.Outcome   `json:"outcome,omitempty"`
	Reason     status.Reason    `json:"reason,omitempty"`
	Message    string           `json:"message,omitempty"`
	Fix        string           `json:"fix,omitempty"`
	ExitCode   *int             `json:"exit_code,omitempty"`
	// Usage is what the agent's provider reported (summed over per_repo
	// processes); absent when it reported nothing.
	Usage    *Usage     `json:"usage,omitempty"`
	Started  time.Time  `json:"started"`
	Finished *time.Time `json:"finished,omitempty"`
	// Worker names the cluster worker that ran the attempt ("" for serve
	// itself); Token is its claim's fencing token.
	Worker string `json:"worker,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	// Role is the part a helper's attempt played in a pipeline shape (a
	// fixer, a judge, a resolve); absent for the pipeline's own steps.
	Role *AttemptRole `json:"role,omitempty"`
}

// Kinds of helper attempts: steps a pipeline does not list that its
// shapes run.
const (
	RoleFixer   = "fixer"   // on_failure: runs on a failed attempt's branch
	RoleJudge   = "judge"   // select: judge:STEP chooses among candidates
	RoleResolve = "resolve" // finishes a parallel group's conflicted merge
)

// AttemptRole is what a helper's attempt did, and for which pipeline step.
type AttemptRole struct {
	Kind string `json:"kind"`
	// For is the pipeline step served: the failed step (fixer), the step
	// whose candidates are judged (judge), the member whose commit
	// conflicted (resolve).
	For string `json:"for"`
	// After is the failed attempt of For a fixer ran after.
	After int `json:"after_attempt,omitempty"`
	// Group and Repo name a resolve's parallel group and conflicted repo.
	Group int    `json:"group,omitempty"`
	Repo  string `json:"repo,omitempty"`
	// Label says all of it in a line, for views.
	Label string `json:"label"`
}

// FixerRole is the role of a fixer run after step's failed attempt n.
func FixerRole(step string, n int) *AttemptRole {
	return &AttemptRole{Kind: RoleFixer, For: step, After: n, Label: fmt.Sprintf("fixer for step %s after its attempt %d", step, n)}
}

// JudgeRole is the role of the judge of step's candidates.
func JudgeRole(step string) *AttemptRole {
	return &AttemptRole{Kind: RoleJudge, For: step, Label: fmt.Sprintf("judge of step %s's candidates", step)}
}

// ResolveRole is the role of the resolve of group's conflicted merge of
// step's commit in repo.
func ResolveRole(group int, step, repo string) *AttemptRole {
	return &AttemptRole{Kind: RoleResolve, For: step, Group: group, Repo: repo,
		Label: fmt.Sprintf("resolve of group %d (step %s's merge in repo %s)", group, step, repo)}
}

// EgressTotals sums an attempt's egress summaries (one per process).
type EgressTotals struct {
	Connections int   `json:"connections"`
	BytesUp     int64 `json:"bytes_up"`
	BytesDown   int64 `json:"bytes_down"`
	Refusals    int   `json:"refusals"`
}

// AllowedHost is one allowlist entry of an attempt with its origin.
type AllowedHost struct {
	Host   string `json:"host"`
	Origin string `json:"origin"`
}

// Duration is how long the attempt took (or has taken so far).
func (a *AttemptRecord) Duration() time.Duration {
	if a.Finished != nil {
		return a.Finished.Sub(a.Started)
	}
	return time.Since(a.Started)
}

// MaxOverlap is the most attempts whose [started, finished] intervals
// overlap at one moment: what serve.max_parallel bounds.
func MaxOverlap(atts []*AttemptRecord) int {
	type edge struct {
		t     time.Time
		delta int
	}
	var es []edge
	for _, a := range atts {
		es = append(es, edge{a.Started, 1}, edge{*a.Finished, -1})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].t.Equal(es[j].t) {
			return es[i].delta < es[j].delta
		}
		return es[i].t.Before(es[j].t)
	})
	cur, max := 0, 0
	for _, e := range es {
		cur += e.delta
		if cur > max {
			max = cur
		}
	}
	return max
}
