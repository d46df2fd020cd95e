package factory

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
)

// agentSpec fills an agent step's argv through its provider.
func (a *attemptRun) agentSpec(spec *steps.Spec, at steps.Attempt, p *preparedProc) error {
	return &status.Error{Reason: status.ReasonProviderMissing, Msg: "agent steps need the providers package, which this build lacks", Fix: "use a build of kusaw with providers"}
}

// sandboxCheck runs sandbox.Check once per engine: it starts bwrap once,
// which is worth doing once, not per attempt.
type sandboxCheck struct {
	once sync.Once
	res  sandbox.CheckResult
}

func (e *Engine) checkSandbox() sandbox.CheckResult {
	e.sbCheck.once.Do(func() {
		if e.opts.SandboxCheck != nil {
			e.sbCheck.res = e.opts.SandboxCheck()
		} else {
			e.sbCheck.res = sandbox.Check()
		}
	})
	return e.sbCheck.res
}

// sandboxed wraps process i in the sandbox backend. A required attempt
// never runs unsandboxed: any failure here refuses it.
func (a *attemptRun) sandboxed(i int, repos []string, spec *steps.Spec, env map[string]string, p *preparedProc) error {
	if res := a.e.checkSandbox(); !res.Available {
		return res.Err()
	}
	own := map[string]bool{}
	for _, r := range repos {
		own[r] = true
	}
	in := sandbox.Input{
		AttemptDir:   a.dir,
		ArtifactsDir: filepath.Join(a.dir, artifactsDir),
		TmpDir:       filepath.Join(a.dir, tmpDir),
		Workdir:      spec.Dir,
		AllowRead:    a.e.F.AllowRead(a.step),
		AllowWrite:   a.e.F.AllowWrite(a.step),
		Env:          env,
	}
	for _, w := range a.rec.Worktrees {
		in.Worktrees = append(in.Worktrees, sandbox.Worktree{Repo: w.Repo, Path: w.Path, GitDir: w.GitDir,
			CommonDir: a.wts[w.Repo].CommonDir, Writable: own[w.Repo]})
	}
	if h, err := os.UserHomeDir(); err == nil {
		in.Home = h
	}
	if d, err := secretstore.Dir(); err == nil {
		in.HiddenPaths = append(in.HiddenPaths, d)
	}
	if spec.Kind == config.KindBuiltin {
		in.ExtraBinaries = append(in.ExtraBinaries, a.e.opts.Kusaw)
	}
	in.LoginPaths = p.loginPaths
	switch a.e.F.EffectiveNetwork(a.step, config.ModeRequired) {
	case config.NetworkAllowlist:
		px, err := a.lease(i, repos)
		if err != nil {
			return err
		}
		in.Network, in.Proxy = sandbox.NetworkAllowlist, px
	default:
		in.Network = sandbox.NetworkOpen
	}
	plan, err := sandbox.BuildPlan(in)
	if err != nil {
		return asRefusal(err, status.ReasonSandboxPlanRefused)
	}
	planJSON := json.RawMessage(plan.JSON())
	a.rec.Processes[i].Sandbox = planJSON
	a.events.Emit(EvSandboxPlan, map[string]any{"repos": repos, "plan": planJSON})
	// The engine's own process handling (group signals, grace period)
	// applies, so the command gets a context that never ends.
	cmd, err := sandbox.Command(context.Background(), plan, spec.Argv)
	if err != nil {
		return asRefusal(err, status.ReasonSandboxUnavailable)
	}
	cmd.Cancel, cmd.WaitDelay = nil, 0
	p.cmd = cmd
	prev := p.cleanup
	p.cleanup = func() {
		_ = plan.Cleanup()
		if prev != nil {
			prev()
		}
	}
	return nil
}

// asRefusal keeps a typed error's reason, or gives an untyped one the
// fallback reason.
func asRefusal(err error, fallback status.Reason) *status.Error {
	if se, ok := err.(*status.Error); ok {
		return se
	}
	return &status.Error{Reason: fallback, Msg: err.Error(), Fix: fallback.Info().Fix}
}

// lease gets process i an egress lease (allowlist mode).
func (a *attemptRun) lease(i int, repos []string) (*sandbox.Proxy, error) {
	return nil, &status.Error{Reason: status.ReasonEgressLeaseFailed, Msg: "network: allowlist needs the egress proxy, which this build lacks", Fix: "set the step's network to open"}
}
