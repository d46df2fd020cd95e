package steps

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/kusaw/kusaw/config"
)

// Environment variable names a step process gets (docs/architecture.md, "The life of an attempt").
const (
	EnvArtifacts = "KUSAW_ARTIFACTS"
	EnvRun       = "KUSAW_RUN"
	EnvStep      = "KUSAW_STEP"
	EnvAttempt   = "KUSAW_ATTEMPT"
	// EnvWorktreePrefix + REPO names each worktree of the attempt.
	EnvWorktreePrefix = "KUSAW_WORKTREE_"
	// EnvBasePrefix + REPO is the commit the run started from in that repo;
	// the diff built-in compares against it.
	EnvBasePrefix = "KUSAW_BASE_"
)

// EnvName turns a repo name into the suffix of its variables: upper case,
// every character that is not a letter or digit becomes '_'.
func EnvName(repo string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(repo) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Worktree is one worktree of an attempt as the step sees it.
type Worktree struct {
	Repo    string // the repo's name in the factory
	Path    string
	BaseSHA string // the run's start commit in this repo
}

// Attempt is what the engine knows about the process it is about to start.
type Attempt struct {
	Run       string
	Step      *config.Step
	Number    int
	Repos     []string   // this process's active repos; the first is its working directory
	Worktrees []Worktree // every worktree of the attempt (per_repo: all of them)
	Artifacts string
	Tmp       string
	Kusaw     string // the kusaw binary, for built-in steps
}

// Spec is a step turned into a process: what to run, where, with what.
type Spec struct {
	Kind config.StepKind
	Argv []string
	Dir  string
	// Env is the step's own environment, KUSAW_* included (NAME=value,
	// sorted). Secret references are not resolved here: Secrets lists the
	// names whose values the engine fills in from the secret store when the
	// process starts.
	Env     map[string]string
	Secrets map[string]string // env name → secret store key
}

// Build turns a command or built-in step into a process spec. Agent steps
// are built by the engine with a provider (see Agent).
func Build(a Attempt) (*Spec, error) {
	s := a.Step
	sp := &Spec{Kind: s.Kind(), Env: map[string]string{}, Secrets: map[string]string{}}
	switch sp.Kind {
	case config.KindCommand:
		sp.Argv = append([]string{}, s.Run...)
	case config.KindBuiltin:
		if a.Kusaw == "" {
			return nil, fmt.Errorf("built-in step %s: the kusaw binary's path is unknown", s.ID)
		}
		sp.Argv = []string{a.Kusaw, "__builtin", s.Builtin}
	case config.KindAgent:
		// argv filled by the caller through a provider.
	}
	if err := fill(sp, a); err != nil {
		return nil, err
	}
	return sp, nil
}

func fill(sp *Spec, a Attempt) error {
	if len(a.Repos) == 0 {
		return fmt.Errorf("step %s: no active repo", a.Step.ID)
	}
	for _, w := range a.Worktrees {
		if w.Repo == a.Repos[0] {
			sp.Dir = w.Path
		}
		sp.Env[EnvWorktreePrefix+EnvName(w.Repo)] = w.Path
		if w.BaseSHA != "" {
			sp.Env[EnvBasePrefix+EnvName(w.Repo)] = w.BaseSHA
		}
	}
	if sp.Dir == "" {
		return fmt.Errorf("step %s: no worktree for its first repo %s", a.Step.ID, a.Repos[0])
	}
	sp.Env[EnvArtifacts] = a.Artifacts
	sp.Env[EnvRun] = a.Run
	sp.Env[EnvStep] = a.Step.ID
	sp.Env[EnvAttempt] = strconv.Itoa(a.Number)
	for _, k := range a.Step.EnvOrder {
		v := a.Step.Env[k]
		if v.Secret != nil {
			sp.Secrets[k] = v.Secret.Key
			delete(sp.Env, k)
			continue
		}
		sp.Env[k] = v.Value
	}
	return nil
}

// TempEnv is the private temp folder's variables for an unsandboxed process
// (the sandbox plan sets the same names itself).
func TempEnv(tmp string) map[string]string {
	return map[string]string{
		"TMPDIR":          tmp,
		"XDG_CACHE_HOME":  tmp + "/cache",
		"XDG_RUNTIME_DIR": tmp + "/run",
	}
}

// HostEnv is the environment of an unsandboxed step: kusaw's own, with the
// spec's env and the temp variables on top, sorted.
func HostEnv(base []string, layers ...map[string]string) []string {
	m := map[string]string{}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	for _, l := range layers {
		for k, v := range l {
			m[k] = v
		}
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Environ is os.Environ, kept as a variable for tests.
var Environ = os.Environ
