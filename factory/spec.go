package factory

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/worktree"
)

// AttemptSpec resolves attempt n (of the last number this occurrence may
// reach) of step s of run r into plain data: the form that runs here and
// the form that crosses to a worker (docs/architecture.md, "The life of an
// attempt"). It reads the run branches' tips, so it is made just before the
// attempt starts.
func (e *Engine) AttemptSpec(r *Run, s *config.Step, n, of int) (*record.AttemptSpec, error) {
	sp := &record.AttemptSpec{Version: record.SpecVersion, ID: record.AttemptID(r.ID(), s.ID, n), Run: r.ID(), Step: s.ID,
		Number: n, Of: of, Pool: s.Pool, Setup: e.F.Setup, Policy: record.PolicyOf(e.F.Sandbox)}
	if sp.Pool == "" {
		sp.Pool = config.DefaultPool
	}
	// The pipeline's wall-time limit binds the attempt wherever it runs.
	if r.limits != nil && r.limits.Duration > 0 && r.Record.Started != nil {
		d := r.Record.Started.Add(r.limits.Duration).UTC()
		sp.Deadline = &d
	}
	if r.exec.skipSetup {
		sp.Setup = nil
	}
	if len(r.params) > 0 {
		sp.Params = map[string]string{}
		for k, v := range r.params {
			sp.Params[k] = v
		}
	}
	// The prompt file is read here, once: the attempt reads the prompt
	// from its spec wherever it runs.
	prompt := s.Prompt
	if s.PromptFile != "" {
		b, err := os.ReadFile(s.PromptFile)
		if err != nil {
			return nil, fmt.Errorf("step %s: cannot read prompt_file: %v", s.ID, err)
		}
		prompt = string(b)
	}
	sp.StepConfig = record.StepOf(s, prompt)
	// (kusaw sandbox doctor's extra allowlist entries stay with its own
	// local runs: they are not part of the step.)
	// A command run in an agent step's place (sandbox exec, doctor's
	// probes) keeps the provider's settings too: its base_url is in the
	// step's allowlist (a local service on localhost:PORT), as validate
	// and egress check say.
	if pc := e.F.Providers[s.Provider]; pc != nil && s.Provider != "" {
		sp.Provider = record.ProviderOf(pc)
	}
	active := e.F.ActiveRepos(s)
	for _, name := range active {
		rr := r.repo(name)
		if rr == nil {
			return nil, fmt.Errorf("repo %s has no run branch", name)
		}
		base, from := rr.HeadSHA, rr.Branch
		// A shape may start the attempt from another branch (a fixer's).
		if b := r.attemptOpt(s.ID, n).From[name]; b != "" {
			from = b
		}
		if repo, err := r.openRepo(name, rr.Path); err == nil {
			if head, err := repo.Head(from); err == nil {
				base = head
			}
		}
		cr := e.F.Repos[name]
		sr := record.SpecRepo{Name: name, RunBranch: rr.Branch, AttemptBranch: worktree.AttemptBranch(r.ID(), s.ID, n), Base: base, RunBase: rr.BaseSHA}
		if cr != nil {
			sr.Sandbox, sr.Sparse, sr.WriteLayer = cr.Sandbox, cr.Sparse, cr.WriteLayer
		}
		sp.Repos = append(sp.Repos, sr)
	}
	// The attempt's mode is the strictest of its processes'.
	for _, repos := range e.F.Attempts(s) {
		m, origin := e.F.EffectiveMode(s, repos)
		sp.Processes = append(sp.Processes, record.SpecProcess{Repos: repos, Mode: m, ModeOrigin: origin, Network: e.F.EffectiveNetwork(s, m)})
		if sp.ModeOrigin == "" || m == config.ModeRequired && sp.Mode != config.ModeRequired {
			sp.Mode, sp.ModeOrigin = m, origin
		}
	}
	if sp.Mode == "" {
		sp.Mode = config.ModeOff
	}
	sp.Network = e.F.EffectiveNetwork(s, sp.Mode)
	sp.Secrets = specSecrets(e.F, s)
	for _, c := range e.F.StepCaches(s) {
		sc := record.SpecCache{Name: c.Name, Env: c.Env}
		if c.Path != filepath.Join(e.F.StateDir, "caches", c.Name) {
			sc.Path = c.Path
		}
		sp.Caches = append(sp.Caches, sc)
	}
	shapeSpec(sp, r.attemptOpt(s.ID, n))
	return sp, sp.Check()
}

// shapeSpec puts what the pipeline's shape asks of the attempt into its
// spec, as data: a retry's handoff, env, the sibling candidates' branches,
// a resolve's merge and a judge's candidates. The run-branch moves (keep)
// stay with serve.
func shapeSpec(sp *record.AttemptSpec, opt attemptOpts) {
	if opt.Handoff != "" {
		sp.Handoff = handoffSpec(opt)
	}
	for k, v := range opt.Env {
		if opt.Handoff != "" && strings.HasPrefix(k, envPrevious) {
			continue // in the handoff
		}
		if sp.Env == nil {
			sp.Env = map[string]string{}
		}
		sp.Env[k] = v
	}
	sp.Siblings = slices.Clone(opt.Siblings)
	if len(opt.Merge) > 0 {
		sp.Merge = maps.Clone(opt.Merge)
	}
	sp.Candidates = slices.Clone(opt.Candidates)
}

// specSecrets lists the secret-store keys an attempt may read.
func specSecrets(f *config.Factory, s *config.Step) []string {
	seen := map[string]bool{}
	for _, v := range s.Env {
		if v.Secret != nil {
			seen[v.Secret.Key] = true
		}
	}
	for _, in := range f.Inject(s) {
		switch {
		case !in.Provider:
			seen[in.Secret] = true
		case s.Kind() == config.KindAgent:
			if pc := f.Providers[s.Provider]; pc != nil && pc.APIKey != nil {
				seen[pc.APIKey.Key] = true
			} else if p, ok := providers.Of(f, s.Provider); ok && p.Spec().Inject != nil {
				seen[p.Spec().Inject.SecretKey] = true
			}
		}
	}
	var out []string
	for k := range seen {
		if k != "" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// hostRepos is every repo of the factory by name and path: the attempt's
// view of the machine, whose inactive repos its sandbox hides.
func (e *Engine) hostRepos() map[string]string {
	out := map[string]string{}
	for name, r := range e.F.Repos {
		out[name] = r.Path
	}
	return out
}

// handoffSpec carries a retry's handoff as data: the folder's files, and
// env and note with the folder's path made a placeholder.
func handoffSpec(opt attemptOpts) *record.SpecHandoff {
	h := &record.SpecHandoff{Files: map[string]string{}, Env: map[string]string{},
		Note: strings.ReplaceAll(opt.Note, opt.Handoff, record.HandoffPlaceholder)}
	entries, _ := os.ReadDir(opt.Handoff)
	for _, e := range entries {
		if e.Type().IsRegular() {
			if b, err := os.ReadFile(filepath.Join(opt.Handoff, e.Name())); err == nil {
				h.Files[e.Name()] = string(b)
			}
		}
	}
	for k, v := range opt.Env {
		if strings.HasPrefix(k, envPrevious) {
			h.Env[k] = strings.ReplaceAll(v, opt.Handoff, record.HandoffPlaceholder)
		}
	}
	return h
}
