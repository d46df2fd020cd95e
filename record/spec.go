package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/config"
)

// SpecVersion is the version of AttemptSpec's wire form. A reader refuses a
// spec of another version rather than run half of it. Version 2 carries
// the shapes' own parts (Env, Siblings, Merge, Candidates) and each repo's
// RunBase: a version-1 worker would run such an attempt without them.
// Version 3 has wire types of its own for the step, policy and provider
// (spec_wire.go) where version 2 carried the config structs' Go fields.
// Version 4 carries an agent described in the factory (provider.agent):
// an older worker would not know the provider.
// Version 5 carries the provider's ca_file and its certificates: a
// version-4 worker would forward to the upstream without trusting its CA.
// Version 6 carries each repo's sparse folders: a version-5 worker would
// check out and commit the whole tree.
// Version 7 carries each repo's write_layer (a version-6 worker would
// refuse the field: better the version's own message).
const SpecVersion = 7

// SpecFile is the attempt's spec beside attempt.json: what it was asked to
// run, as it would cross to a worker.
const SpecFile = "spec.json"

// AttemptSpec is one attempt as plain data: everything a machine needs to
// run it, and nothing that names a path on the machine that made it. The
// factory runs a local attempt from this spec exactly as a worker runs a
// remote one (docs/architecture.md, "The life of an attempt"); the running
// form (processes, leases, open files) lives in package attempt only.
//
// Secrets are references: env values name a secret-store key, inject
// entries name theirs. The values never travel in a spec.
type AttemptSpec struct {
	Version int    `json:"version"`
	ID      string `json:"id"` // <run>/<step>/<n>, unique in serve's state
	Run     string `json:"run"`
	Step    string `json:"step"`
	Number  int    `json:"number"`
	Of      int    `json:"of"`
	Pool    string `json:"pool,omitempty"`
	// Deadline, when set, is when the attempt must have ended wherever it
	// runs (the step's timeout counts from its process's start).
	Deadline *time.Time `json:"deadline,omitempty"`

	// Repos are the step's active repos in order, each with the commit the
	// attempt starts from.
	Repos []SpecRepo `json:"repos"`
	// Processes are resolved per process (one, or one per repo with
	// per_repo); Mode, ModeOrigin and Network are the attempt's (the
	// strictest of its processes').
	Processes  []SpecProcess  `json:"processes"`
	Mode       config.Mode    `json:"mode"`
	ModeOrigin string         `json:"mode_origin"`
	Network    config.Network `json:"network"`

	// Setup runs outside the sandbox in each new worktree.
	Setup [][]string `json:"setup,omitempty"`
	// StepConfig is the step as the attempt runs it, with its prompt file
	// read into Prompt.
	StepConfig SpecStep `json:"step_config"`
	// Policy is the factory's sandbox policy (allowlist, inject entries,
	// budgets, allow_read/allow_write, which name toolchain paths of the
	// machine that runs the attempt).
	Policy SpecPolicy `json:"policy"`
	// Provider is the step's provider configuration (agent steps).
	Provider *SpecProvider `json:"provider,omitempty"`
	// Params are serve's run parameters (KUSAW_PARAM_<NAME>; not secrets).
	Params map[string]string `json:"params,omitempty"`
	// Secrets lists every secret-store key the attempt refers to (env
	// values, inject entries, the provider's API key): what a worker must
	// be given, sealed to its key, or hold itself.
	Secrets []string `json:"secrets,omitempty"`
	// Caches are the step's caches (the factory's and its own): a name and
	// variable, and a folder only when the file names one; otherwise the
	// machine that runs the attempt keeps it in its own state folder.
	Caches []SpecCache `json:"caches,omitempty"`
	// Handoff is what a retry is told about the attempt before it.
	Handoff *SpecHandoff `json:"handoff,omitempty"`

	// The pipeline's shape around the attempt (docs/pipelines.md), as
	// data: what it adds to the step, never a path.
	//
	// Env is what a shape adds to the environment, by the names in
	// ShapeEnv only.
	Env map[string]string `json:"env,omitempty"`
	// Siblings are the attempt branches of the candidates running beside
	// this one: the step's ref guard leaves them alone.
	Siblings []string `json:"siblings,omitempty"`
	// Merge names, per active repo, the commit merged into the worktree
	// before the step (a resolve step finishes the merge).
	Merge map[string]string `json:"merge,omitempty"`
	// Candidates are, for a judge, the passing candidates' commits: the
	// machine that runs it exports each into a read-only folder of its
	// own (KUSAW_CANDIDATE_<n>, KUSAW_CANDIDATES).
	Candidates []SpecCandidate `json:"candidates,omitempty"`
}

// Names a shape may add to an attempt's environment (AttemptSpec.Env).
const (
	EnvCandidate      = "KUSAW_CANDIDATE"       // the candidate's number
	EnvMergeConflicts = "KUSAW_MERGE_CONFLICTS" // the conflicted files, one a line
)

// ShapeEnv lists the names AttemptSpec.Env may set.
var ShapeEnv = []string{EnvCandidate, EnvMergeConflicts}

// SpecCandidate is one passing candidate a judge reads: its number and
// the commit it ended at, per repo.
type SpecCandidate struct {
	Number int               `json:"number"`
	Heads  map[string]string `json:"heads"`
}

// SpecNeed is a commit the machine that runs an attempt must hold.
type SpecNeed struct {
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
}

// Needs lists every commit the attempt reads, base commits first: each
// repo's base, then the commits it merges, then a judge's candidates'.
func (s *AttemptSpec) Needs() []SpecNeed {
	var out []SpecNeed
	seen := map[SpecNeed]bool{}
	add := func(repo, commit string) {
		n := SpecNeed{Repo: repo, Commit: commit}
		if commit != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, r := range s.Repos {
		add(r.Name, r.Base)
	}
	for _, r := range s.Repos {
		add(r.Name, s.Merge[r.Name])
	}
	for _, c := range s.Candidates {
		repos := make([]string, 0, len(c.Heads))
		for name := range c.Heads {
			repos = append(repos, name)
		}
		sort.Strings(repos)
		for _, name := range repos {
			add(name, c.Heads[name])
		}
	}
	return out
}

// HandoffPlaceholder stands, in a handoff's env and note, for the folder
// the machine that runs the attempt puts the handoff's files in.
const HandoffPlaceholder = "${KUSAW_HANDOFF_DIR}"

// SpecHandoff is the previous attempt's outcome and output tails: files
// (by name) the step reads, env (KUSAW_PREVIOUS_*) and the agent's note,
// with the folder written as HandoffPlaceholder.
type SpecHandoff struct {
	Files map[string]string `json:"files"`
	Env   map[string]string `json:"env"`
	Note  string            `json:"note,omitempty"`
}

// SpecCache is one cache of an attempt.
type SpecCache struct {
	Name string `json:"name"`
	Env  string `json:"env"`
	Path string `json:"path,omitempty"`
}

// SpecRepo is one active repo of an attempt.
type SpecRepo struct {
	Name    string      `json:"name"`
	Sandbox config.Mode `json:"sandbox,omitempty"` // the repo's own sandbox mode
	// RunBranch and AttemptBranch are branch names, the same on every
	// machine; Base is the commit the attempt branch starts at.
	RunBranch     string `json:"run_branch"`
	AttemptBranch string `json:"attempt_branch"`
	Base          string `json:"base"`
	// RunBase is the commit the run started from: setup runs outside the
	// sandbox only on it (code no step of the run wrote), and a step reads
	// it as KUSAW_BASE_<REPO>.
	RunBase string `json:"run_base"`
	// Sparse are the folders the attempt's worktree checks out
	// (repos.NAME.sparse); its commit keeps everything else as in Base.
	// A kusaw that does not know the field refuses the spec (ParseSpec)
	// rather than check out and commit the whole tree.
	Sparse []string `json:"sparse,omitempty"`
	// WriteLayer is repos.NAME.write_layer ("overlay", or "" for none):
	// whether a sandboxed step writes the worktree through a write layer.
	WriteLayer string `json:"write_layer,omitempty"`
}

// SpecProcess is one process of an attempt, resolved.
type SpecProcess struct {
	Repos      []string       `json:"repos"`
	Mode       config.Mode    `json:"mode"`
	ModeOrigin string         `json:"mode_origin"`
	Network    config.Network `json:"network"`
}

// AttemptID is the id an attempt has across machines.
func AttemptID(run, step string, n int) string { return fmt.Sprintf("%s/%s/%d", run, step, n) }

// Check refuses a spec that cannot be run as it stands: another version, a
// missing id, a repo without a base commit, a host path.
func (s *AttemptSpec) Check() error {
	switch {
	case s.Version != SpecVersion:
		return fmt.Errorf("attempt spec version %d, this kusaw reads version %d: run the same kusaw version on serve and its workers", s.Version, SpecVersion)
	case s.Run == "" || s.Step == "" || s.Number < 1:
		return fmt.Errorf("attempt spec without a run, step or attempt number")
	case s.ID != AttemptID(s.Run, s.Step, s.Number):
		return fmt.Errorf("attempt spec id %q does not match %s", s.ID, AttemptID(s.Run, s.Step, s.Number))
	case s.StepConfig.ID != s.Step:
		return fmt.Errorf("attempt spec carries step %q for step %q", s.StepConfig.ID, s.Step)
	case len(s.Processes) == 0:
		return fmt.Errorf("attempt spec without a process")
	}
	active := map[string]bool{}
	for _, r := range s.Repos {
		if r.Name == "" || r.Base == "" || r.RunBase == "" || r.AttemptBranch == "" || r.RunBranch == "" {
			return fmt.Errorf("attempt spec repo %q without a base commit, the run's starting commit or a branch", r.Name)
		}
		active[r.Name] = true
	}
	if err := s.checkWire(); err != nil {
		return err
	}
	return s.checkShape(active)
}

// checkShape refuses shape parts the machine could not honour as asked:
// env beyond ShapeEnv, a sibling that is not another attempt branch of
// the same step, a merge or candidate that names no commit.
func (s *AttemptSpec) checkShape(active map[string]bool) error {
	for k, v := range s.Env {
		if !slices.Contains(ShapeEnv, k) || strings.ContainsRune(v, 0) {
			return fmt.Errorf("attempt spec sets env %s, which a shape does not set", k)
		}
	}
	for _, b := range s.Siblings {
		dir, num := path.Split(b)
		n, err := strconv.Atoi(num)
		if path.Clean(b) != b || !strings.HasSuffix(dir, "/"+s.Run+"/"+s.Step+"/") || err != nil || n < 1 || n == s.Number || strconv.Itoa(n) != num {
			return fmt.Errorf("attempt spec sibling %q is not another attempt branch of step %s", b, s.Step)
		}
	}
	for repo, c := range s.Merge {
		if !active[repo] || !IsCommitID(c) {
			return fmt.Errorf("attempt spec merges %q into repo %q: not a commit into an active repo", c, repo)
		}
	}
	nums := map[int]bool{}
	for _, c := range s.Candidates {
		if c.Number < 1 || nums[c.Number] {
			return fmt.Errorf("attempt spec candidate %d is not a candidate's number or is repeated", c.Number)
		}
		nums[c.Number] = true
		for repo, h := range c.Heads {
			if !validRepoName(repo) || !IsCommitID(h) {
				return fmt.Errorf("attempt spec candidate %d names %q in repo %q: not a commit", c.Number, h, repo)
			}
		}
	}
	return nil
}

// IsCommitID reports whether s is a full commit id (SHA-1 or SHA-256, in
// lower-case hex).
func IsCommitID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// validRepoName is a repo name that is a plain folder name.
func validRepoName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00")
}

// Marshal is the spec's wire form.
func (s *AttemptSpec) Marshal() ([]byte, error) { return json.Marshal(s) }

// ParseSpec reads a spec's wire form and checks it. A field this kusaw
// does not know is refused: the attempt would run without it.
func ParseSpec(b []byte) (*AttemptSpec, error) {
	var s AttemptSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("attempt spec: %v", err)
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Factory is the one-step factory the spec describes on a machine whose
// state folder is stateDir and whose repos are at paths (repo name →
// path; it may name repos the step does not use, which the sandbox then
// hides). The step is returned too.
func (s *AttemptSpec) Factory(stateDir string, paths map[string]string) (*config.Factory, *config.Step) {
	var repos []string
	for _, r := range s.Repos {
		repos = append(repos, r.Name)
	}
	step := s.StepConfig.config(repos)
	f := &config.Factory{Version: 1, StateDir: stateDir, Repos: map[string]*config.Repo{},
		Providers: map[string]*config.ProviderConfig{}, Setup: s.Setup, Sandbox: s.Policy.config(),
		Pipelines: map[string]*config.Pipeline{}, Steps: map[string]*config.Step{step.ID: step}, StepOrder: []string{step.ID}}
	for _, r := range s.Repos {
		f.Repos[r.Name] = &config.Repo{Name: r.Name, Path: paths[r.Name], Sandbox: r.Sandbox, WriteLayer: r.WriteLayer}
		f.RepoOrder = append(f.RepoOrder, r.Name)
	}
	var others []string
	for name := range paths {
		if f.Repos[name] == nil {
			others = append(others, name)
		}
	}
	sort.Strings(others)
	for _, name := range others {
		f.Repos[name] = &config.Repo{Name: name, Path: paths[name]}
		f.RepoOrder = append(f.RepoOrder, name)
	}
	for _, c := range s.Caches {
		if f.Caches == nil {
			f.Caches = map[string]*config.Cache{}
		}
		p := c.Path
		if p == "" {
			p = filepath.Join(stateDir, "caches", c.Name)
		}
		f.Caches[c.Name] = &config.Cache{Name: c.Name, Env: c.Env, Path: p}
	}
	if s.Provider != nil && step.Provider != "" {
		f.Providers[step.Provider] = s.Provider.config()
	}
	return f, step
}
