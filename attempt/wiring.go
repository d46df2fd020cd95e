package attempt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
)

// agentSpec fills an agent step's argv and env through its provider, and
// sets up the parsing of its stream into provider.* events; the result
// event, not the exit status, decides the outcome.
func (a *Attempt) agentSpec(spec *steps.Spec, at steps.Attempt, p *preparedProc, sp record.SpecProcess) error {
	s := a.step
	sandboxed := sp.Mode == config.ModeRequired
	// The prompt file was read into the spec's prompt where it was made.
	// A trigger's task reaches the agent as text, never through a shell.
	prompt := config.ExpandParams(s.Prompt, a.spec.Params) + a.job.Shape.Note
	in := providers.PrepareInput{Provider: s.Provider, Step: s.ID, Prompt: prompt, Sandboxed: sandboxed,
		Network: providerNetwork(sp.Network), FreshHome: providers.FreshHome(runtime.GOOS, sandboxed), Agent: providers.DefOf(a.f, s.Provider)}
	if pc := a.f.Providers[s.Provider]; pc != nil {
		in.Command, in.Args, in.Model, in.BaseURL = pc.Command, pc.Args, pc.Model, pc.BaseURL
	}
	// A base URL known only at start (the lease's inject endpoint) is
	// filled into argv by expandArgv just before the process starts.
	in.ExpandsArgv = true
	for _, w := range at.Worktrees {
		if w.Path != spec.Dir {
			in.ExtraDirs = append(in.ExtraDirs, w.Path)
		}
	}
	for _, e := range a.f.Inject(s) {
		if e.Provider {
			in.Inject = in.Network == string(config.NetworkAllowlist)
		}
	}
	in.StepEnv = append(in.StepEnv, s.EnvOrder...)
	in.Writable = a.f.SandboxWritable()
	// A per-attempt settings folder (Cursor's cli-config.json), inside the
	// attempt's tmp so the sandbox sees it and it goes with the attempt.
	in.ConfigDir = filepath.Join(at.Tmp, ProviderConfigDir)
	if rs := a.job.Shape.Resume; rs != nil {
		in.Resume = rs.SessionID
	}
	if s.Limits != nil {
		in.MaxTurns, in.MaxBudgetUSD = s.Limits.Turns, s.Limits.CostUSD
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prep, err := providers.Prepare(ctx, in)
	if err != nil {
		return asRefusal(err, status.ReasonProviderMissing)
	}
	if rs := a.job.Shape.Resume; rs != nil && prep.ConfigDir != "" {
		// The session's files: a copy of the previous attempt's, in
		// this attempt's own provider folder.
		if err := providers.CarrySession(s.Provider, rs.SessionID, rs.ConfigDir, prep.ConfigDir); err != nil {
			return &status.Error{Reason: status.ReasonStepStartFailed, Msg: fmt.Sprintf("step %s: cannot carry the previous attempt's session: %v", s.ID, err),
				Fix: "check that the state folder is readable and writable, or remove continue_session"}
		}
	}
	spec.Argv = prep.Argv
	// The provider's env goes under the step's own, which wins.
	for _, kv := range prep.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, set := spec.Env[k]; !set {
				if _, secret := spec.Secrets[k]; !secret {
					spec.Env[k] = v
				}
			}
		}
	}
	p.loginPaths, p.readPaths, p.egressHosts = prep.LoginPaths, prep.ReadPaths, prep.Probe.EgressHosts
	p.commandWords, p.agent = factoryWords(prep.Argv, in), true
	if pv, ok := providers.Get(s.Provider); ok && (a.job.Shape.KeepSession || a.job.Shape.Resume != nil) {
		p.loginSessionDirs = pv.Spec().LoginSessionDirs
	}
	p.probe = &record.ProviderProbe{Path: prep.Probe.Path, Version: prep.Probe.Version}
	prov := prep.Provider
	if prov != nil {
		for _, c := range prov.Spec().Credentials {
			p.credentialRules = append(p.credentialRules, sandbox.CredentialRule{Name: c.File, Hosts: c.TokenHosts, Tokens: c.Tokens, Expiry: c.Expiry})
		}
	}
	probeData := map[string]any{"provider": s.Provider, "path": prep.Probe.Path, "version": prep.Probe.Version}
	if in.Resume != "" {
		probeData["resume"] = in.Resume // continue_session: the session it continues
	}
	a.events.Emit(record.EvProviderProbe, probeData)
	if prep.ConfigDir != "" {
		// The CLI's settings for this attempt: a copy of the user's with
		// what the sandbox needs; the user's own file is not touched.
		a.events.Emit(record.EvProviderConfig, map[string]any{"dir": prep.ConfigDir, "network": in.Network})
	}
	p.exitGrace = config.DefaultExitGrace
	if pc := a.f.Providers[s.Provider]; pc != nil && pc.ExitGrace > 0 {
		p.exitGrace = pc.ExitGrace
	}
	p.parse = func(r io.Reader, watch func(providers.Event)) procParse {
		res := prov.ParseStream(r, func(ev providers.Event) {
			a.events.Emit(ev.Type, ev.Data)
			watch(ev)
		})
		return procParse{result: res, usage: res.Usage, outcome: func(exit int) (status.Outcome, status.Reason, string) {
			o, reason := prov.Outcome(res, exit)
			msg := ""
			switch {
			case reason == status.ReasonLimitReached:
				msg = fmt.Sprintf("the agent stopped itself at its limits.%s (%s result)", providers.LimitSubtypes[res.Subtype], res.Subtype)
			case reason != status.ReasonNone:
				msg = reason.Info().Message
				if res.Text != "" && res.IsError {
					msg += ": " + clip(res.Text, 300)
				}
			}
			return o, reason, msg
		}}
	}
	return nil
}

// factoryWords are the words of an agent's argv that the factory file
// wrote: the CLI, the provider's args, the literal words of an agent
// definition's argv. The rest is not the file's, so no path it names is
// shown to the sandbox (commandFiles): the prompt (a trigger's issue text
// or a review comment can be all of it), and the session id of
// continue_session, which the previous attempt's agent itself reported.
func factoryWords(argv []string, in providers.PrepareInput) []string {
	own := map[string]bool{}
	if len(argv) > 0 {
		own[argv[0]] = true
	}
	for _, a := range in.Args {
		own[a] = true
	}
	if in.Agent != nil {
		for _, a := range in.Agent.Argv {
			if !strings.Contains(a, "{") {
				own[a] = true
			}
		}
	}
	var out []string
	for _, a := range argv {
		if own[a] {
			out = append(out, a)
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// sandboxed wraps process i in the sandbox backend. A required attempt
// never runs unsandboxed: any failure here refuses it.
func (a *Attempt) sandboxed(i int, repos []string, spec *steps.Spec, env map[string]string, p *preparedProc) error {
	if res := a.h.sandboxCheck(); !res.Available {
		return res.Err()
	}
	own := map[string]bool{}
	for _, r := range repos {
		own[r] = true
	}
	in := sandbox.Input{
		AttemptDir:              a.dir,
		ArtifactsDir:            filepath.Join(a.dir, record.ArtifactsDir),
		TmpDir:                  filepath.Join(a.dir, record.TmpDir),
		Workdir:                 spec.Dir,
		AllowRead:               append(a.f.AllowRead(a.step), p.readPaths...),
		AllowWrite:              append(a.f.AllowWrite(a.step), a.cachePaths()...),
		SettingsScriptsWritable: a.f.Sandbox.SettingsScriptsWritable,
		Env:                     env,
	}
	// A private object folder per sandbox: the repositories' own objects/
	// are read-only inside (a loose object could otherwise be replaced),
	// and per_repo's sandboxes do not share one either.
	od := filepath.Join(a.dir, record.ObjectsDir, strconv.Itoa(i))
	if err := os.MkdirAll(od, 0o700); err != nil {
		return &status.Error{Reason: status.ReasonSandboxPlanRefused, Msg: "cannot create " + od + ": " + err.Error(), Fix: "check that state_dir is writable"}
	}
	in.ObjectDir = od
	a.setObjectDir(repos, od)
	for _, w := range a.rec.Worktrees {
		sw := sandbox.Worktree{Repo: w.Repo, Path: w.Path, GitDir: w.GitDir,
			CommonDir: a.wts[w.Repo].CommonDir, Writable: own[w.Repo]}
		if own[w.Repo] && runtime.GOOS == "linux" {
			store, err := a.newRefStore(w.Repo)
			if err != nil {
				return &status.Error{Reason: status.ReasonSandboxPlanRefused, Msg: err.Error(), Fix: "check that state_dir is writable"}
			}
			sw.RefStore = store
			sw.Layer = a.writeLayer(w.Repo)
		}
		in.Worktrees = append(in.Worktrees, sw)
	}
	if h, err := os.UserHomeDir(); err == nil {
		in.Home = h
	}
	if d, err := secretstore.Dir(); err == nil {
		in.HiddenPaths = append(in.HiddenPaths, d)
	}
	// serve's API socket and the state folder's bookkeeping are hidden: a
	// step that could reach serve could queue runs it was not given. The
	// socket's folder is made now so it is hidden even if serve starts
	// after the step.
	sockDir := filepath.Join(a.f.StateDir, record.ServeSocketDir)
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		return &status.Error{Reason: status.ReasonSandboxPlanRefused, Msg: "cannot create " + sockDir + ": " + err.Error(), Fix: "check that state_dir is writable"}
	}
	in.HiddenPaths = append(in.HiddenPaths, sockDir, filepath.Join(a.f.StateDir, record.ActiveDir))
	// The cluster's keys (serve's CA and identity, workers' keys) are never
	// a step's to read: a step holding serve's nkey could queue work.
	clusterDir := filepath.Join(a.f.StateDir, record.ClusterDir)
	if err := os.MkdirAll(clusterDir, 0o700); err != nil {
		return &status.Error{Reason: status.ReasonSandboxPlanRefused, Msg: "cannot create " + clusterDir + ": " + err.Error(), Fix: "check that state_dir is writable"}
	}
	in.HiddenPaths = append(in.HiddenPaths, clusterDir)
	in.HiddenPaths = append(in.HiddenPaths, a.h.Hide...)
	// The factory's other repos are not the step's to read. (One that
	// holds the state folder, and so this attempt, stays: the sandbox
	// hides a checkout only around what the step needs from it.)
	for _, name := range a.f.RepoOrder {
		if _, active := a.wts[name]; !active && !within(a.f.Repos[name].Path, a.dir) {
			in.HiddenPaths = append(in.HiddenPaths, a.f.Repos[name].Path)
		}
	}
	if spec.Kind == config.KindBuiltin || len(spec.Argv) > 0 && spec.Argv[0] == a.h.Kusaw {
		in.ExtraBinaries = append(in.ExtraBinaries, a.h.Kusaw)
	}
	in.LoginPaths, in.CredentialRules = p.loginPaths, p.credentialRules
	if len(p.loginSessionDirs) > 0 {
		// continue_session: the session folders of the attempt's login
		// copy are kept in its folder, and the previous attempt's kept
		// ones start this copy; never the user's own.
		in.LoginSession = &sandbox.LoginSession{Dirs: p.loginSessionDirs, Keep: filepath.Join(a.dir, SessionDir, "login")}
		if rs := a.job.Shape.Resume; rs != nil {
			in.LoginSession.From = filepath.Join(rs.ConfigDir, "login")
		}
	}
	// The view is an allowlist: a script the command names outside it
	// (run: [sh, /srv/factory/check.sh]) is shown read-only. An agent's
	// argv also holds text that is not the factory file's (factoryWords):
	// only the file's own words may name such a script.
	in.Argv = spec.Argv
	if p.agent {
		in.Argv = p.commandWords
	}
	switch a.spec.Processes[i].Network {
	case config.NetworkAllowlist, config.NetworkAudit:
		px, err := a.lease(i, repos, p)
		if err != nil {
			return err
		}
		in.Network, in.Proxy = sandbox.NetworkAllowlist, px
	default:
		in.Network = sandbox.NetworkOpen
	}
	plan, err := sandbox.BuildPlan(in)
	if err != nil {
		p.release()
		return asRefusal(err, status.ReasonSandboxPlanRefused)
	}
	for _, w := range in.Worktrees {
		if w.Layer != "" {
			// bwrap may make them through the overlay: kusaw's, not the step's.
			a.wts[w.Repo].NoteWritten(plan.StandIns...)
		}
	}
	planJSON := json.RawMessage(plan.JSON())
	a.rec.Processes[i].Sandbox = planJSON
	a.events.Emit(record.EvSandboxPlan, map[string]any{"repos": repos, "plan": planJSON})
	argv, err := expandArgv(spec.Argv, in.Proxy, env)
	if err != nil {
		p.release()
		return err
	}
	// The engine's own process handling (group signals, grace period)
	// applies, so the command gets a context that never ends.
	cmd, err := sandbox.Command(context.Background(), plan, argv)
	if err != nil {
		p.release()
		return asRefusal(err, status.ReasonSandboxUnavailable)
	}
	cmd.Cancel, cmd.WaitDelay = nil, 0
	p.cmd = cmd
	prev := p.cleanup
	leased := in.Proxy != nil
	p.cleanup = func() {
		// The lease closes first: then every connection of the step is in
		// the egress log, which decides whether a refresh could have
		// happened.
		if prev != nil {
			prev()
		}
		if obs := a.egressObs(); leased && obs != nil {
			plan.Reached = obs.reachedHost
		}
		// Carries the agent's refreshed login back, checked; what it
		// refuses is said, never carried.
		err := plan.Cleanup()
		for _, c := range plan.Carried {
			a.events.Emit(record.EvSandboxCredentials, map[string]any{"repos": repos, "file": c.File, "carried": c.Carried, "token_host": c.Host, "reason": c.Reason})
		}
		if err != nil {
			a.events.Emit(record.EvSandboxCleanup, map[string]any{"repos": repos, "error": err.Error()})
		}
	}
	return nil
}

func (a *Attempt) setObjectDir(repos []string, dir string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.objDirs == nil {
		a.objDirs = map[string]string{}
	}
	for _, r := range repos {
		a.objDirs[r] = dir
	}
}

// newRefStore makes the repo's private ref store for this attempt's
// sandbox (Linux): the repository's own ref and reflog folders then stay
// read-only inside (docs/sandbox.md, "What a step leaves behind").
func (a *Attempt) newRefStore(repo string) (string, error) {
	dir := filepath.Join(a.dir, record.RefStoreDir, repo)
	start := time.Now()
	n, err := a.wts[repo].NewRefStore(dir)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	if a.refStores == nil {
		a.refStores = map[string]string{}
	}
	a.refStores[repo] = dir
	a.mu.Unlock()
	a.events.Emit(record.EvRefStore, map[string]any{"repo": repo, "refs": n, "duration_us": time.Since(start).Microseconds()})
	return dir, nil
}

func (a *Attempt) refStore(repo string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refStores[repo]
}

func (a *Attempt) objectDir(repo string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.objDirs[repo]
}

// asRefusal keeps a typed error's reason, or gives an untyped one the
// fallback reason.
func asRefusal(err error, fallback status.Reason) *status.Error {
	if se, ok := err.(*status.Error); ok {
		return se
	}
	return &status.Error{Reason: fallback, Msg: err.Error(), Fix: fallback.Info().Fix}
}

// providerNetwork is the network a provider plans for: audit is an
// allowlist sandbox to it (the proxy is the only way out).
func providerNetwork(n config.Network) string {
	if n.Proxied() {
		return string(config.NetworkAllowlist)
	}
	return string(n)
}

// expandArgv fills in the values an agent's argv takes from the env known
// only at start (providers.EnvRef): the lease's variables first (the
// inject endpoint), then the step's own.
func expandArgv(argv []string, px *sandbox.Proxy, env map[string]string) ([]string, error) {
	out, err := providers.ExpandArgv(argv, func(name string) (string, bool) {
		if px != nil {
			for _, kv := range px.Env {
				if k, v, ok := strings.Cut(kv, "="); ok && k == name {
					return v, true
				}
			}
		}
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		return nil, &status.Error{Reason: status.ReasonStepStartFailed, Msg: err.Error(),
			Fix: "set providers.<provider>.base_url, or the variable in the step's env"}
	}
	return out, nil
}

// ProviderConfigDir is the per-attempt provider folder under the
// attempt's tmp (Cursor's config, Codex's and Gemini's homes).
const ProviderConfigDir = "provider-config"

// SessionDir is where a continue_session step's attempt keeps its agent's
// session files when it ends (tmp/ goes): the run's next attempt of the
// step copies them.
const SessionDir = "session"
