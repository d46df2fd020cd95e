package providers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kusaw/kusaw/status"
)

// PrepareInput is what the engine knows about one agent process before it
// starts, as plain data.
type PrepareInput struct {
	Provider string // steps.<id>.provider ("" = Default)
	// Agent is the provider's description when the factory describes it
	// (providers.NAME.agent, DefOf); nil for a built-in provider.
	Agent     *AgentDef
	Step      string   // step id, for messages and fixes
	Command   string   // providers.<name>.command ("" = the default names)
	Args      []string // providers.<name>.args
	Prompt    string   // the prompt (prompt_file already read)
	ExtraDirs []string // the attempt's other worktrees
	Sandboxed bool     // kusaw's sandbox wraps the process
	Network   string   // effective network: open | allowlist
	FreshHome bool     // the sandbox gives a fresh HOME (FreshHome(goos, sandboxed))
	Inject    bool     // the proxy injects this provider's key
	StepEnv   []string // names (NAME or NAME=...) the step's env sets, secrets included
	// ConfigDir is a private folder of the attempt, visible inside its
	// sandbox, where a provider may write per-attempt CLI settings
	// (Cursor's cli-config.json). Empty: none are written.
	ConfigDir string
	// Writable are the host folders the factory's sandboxes may write
	// (config.Factory.SandboxWritable): a CLI inside one is refused, as
	// one inside any provider's login folder is, and never run.
	Writable []string
	// MaxTurns and MaxBudgetUSD: see RunRequest.
	MaxTurns     int
	MaxBudgetUSD float64
	// Model is providers.<name>.model ("" = the CLI's default).
	Model string
	// BaseURL is providers.<name>.base_url (the inject upstream, or
	// where the CLI goes when kusaw does not inject).
	BaseURL string
	// Resume is the session id continue_session carries from the run's
	// previous attempt of the step ("" = a new session).
	Resume string
	// ExpandsArgv says the caller runs ExpandArgv on Prepared.Argv with
	// the process's final env before it starts it. Without it a provider
	// whose argv needs a value known only then (Codex's base URL under
	// inject) is refused with a clear message.
	ExpandsArgv bool
}

// Prepared is everything needed to start the process.
type Prepared struct {
	// Provider is the provider that runs: what parses its stream and
	// decides its outcome.
	Provider Provider
	Probe    Probe
	Argv     []string
	// Env goes into the process environment before the step's own env
	// (which wins).
	Env []string
	// LoginPaths are the CLI's state folders and files that exist; the
	// Linux sandbox mounts them read/write. Empty with a fresh HOME.
	LoginPaths []string
	// ReadPaths must be readable inside the sandbox: the CLI's install
	// folder (it may live under the hidden home).
	ReadPaths []string
	Token     TokenNeed
	// ConfigDir is the per-attempt settings folder the provider wrote
	// (empty when none): Env points the CLI at it.
	ConfigDir string
}

// Prepare probes the provider's CLI, checks the login token and builds argv
// and env. Errors are *status.Error: provider.missing for an unknown
// provider or a missing CLI, sandbox.token_missing for a fresh HOME without
// a token, step.start_failed for args or a prompt kusaw cannot pass.
func Prepare(ctx context.Context, in PrepareInput) (Prepared, error) {
	name := in.Provider
	if name == "" {
		name = Default
	}
	p, ok := Get(name)
	if in.Agent != nil && !ok {
		var err error
		if p, err = NewAgent(*in.Agent); err != nil {
			return Prepared{}, &status.Error{Reason: status.ReasonProviderMissing, Msg: fmt.Sprintf("step %s: %v", stepName(in.Step), err),
				Fix: "fix providers." + name + ".agent as the message says (kusaw validate names the line)"}
		}
		ok = true
	}
	if !ok {
		return Prepared{}, &status.Error{Reason: status.ReasonProviderMissing,
			Msg: fmt.Sprintf("step %s: unknown provider %q", stepName(in.Step), name), Fix: "use one of: " + strings.Join(Names(), ", ") + ", or describe it under providers." + name + ".agent"}
	}
	out := Prepared{Provider: p}
	out.Token = needsToken(p, in.Step, in.FreshHome, in.Inject)
	if err := out.Token.Err(in.StepEnv); err != nil {
		return Prepared{}, err
	}
	// Every registered provider probes through its Spec (probe); the
	// factory's writable folders are checked too.
	pr, err := probeAvoiding(ctx, p.Spec(), in.Command, in.Writable)
	if err != nil {
		return Prepared{}, err
	}
	out.Probe = pr
	req := RunRequest{Command: pr.Path, Args: in.Args, Prompt: in.Prompt, ExtraDirs: in.ExtraDirs, Sandboxed: in.Sandboxed, Network: in.Network,
		MaxTurns: in.MaxTurns, MaxBudgetUSD: in.MaxBudgetUSD, Model: in.Model, Resume: in.Resume, ConfigDir: in.ConfigDir}
	spec := p.Spec()
	if in.Resume != "" && in.FreshHome && len(spec.LoginSessionDirs) > 0 {
		// The session's files were in the previous attempt's fresh HOME,
		// removed with its temp folder.
		return Prepared{}, &status.Error{Reason: status.ReasonStepStartFailed,
			Msg: fmt.Sprintf("step %s: continue_session: %s keeps its sessions in its login folder, and this sandbox gives each attempt a fresh HOME (macOS), so session %s cannot be continued", stepName(in.Step), name, in.Resume),
			Fix: fmt.Sprintf("remove continue_session from steps.%s, or run it on Linux", stepName(in.Step))}
	}
	switch {
	case in.Inject && spec.Inject != nil:
		req.BaseURLFromEnv = true
	case in.BaseURL != "":
		req.BaseURL = in.BaseURL
	case spec.Env.BaseURL != "" && setsEnv(in.StepEnv, spec.Env.BaseURL):
		req.BaseURLFromEnv = true
	}
	if in.Sandboxed {
		// The folder of a PATH symlink (~/.local/bin) may be hidden in the
		// sandbox; the binary itself is in ReadPaths.
		req.Command = pr.RealPath
		out.ReadPaths = []string{pr.InstallDir}
		// An npm-installed CLI loads sibling packages (Codex its platform
		// binary, @openai/codex-linux-x64): the node_modules folder it is in.
		if i := strings.LastIndex(pr.RealPath, string(filepath.Separator)+"node_modules"+string(filepath.Separator)); i > 0 {
			out.ReadPaths = append(out.ReadPaths, pr.RealPath[:i+len("/node_modules")])
		}
	}
	if g, ok := p.(generic); ok && g.readsPromptFile() {
		// The prompt in a file of the attempt's own, which its sandbox
		// can read; kept with the attempt.
		if in.ConfigDir == "" {
			return Prepared{}, &status.Error{Reason: status.ReasonStepStartFailed, Msg: fmt.Sprintf("step %s: %s reads its prompt from a file, and this executor gives it no folder", stepName(in.Step), name),
				Fix: "use {prompt} in providers." + name + ".agent.argv"}
		}
		req.PromptFile = filepath.Join(in.ConfigDir, "prompt.txt")
		if err := os.MkdirAll(in.ConfigDir, 0o700); err == nil {
			err = os.WriteFile(req.PromptFile, []byte(in.Prompt), 0o600)
		}
		if err != nil {
			return Prepared{}, &status.Error{Reason: status.ReasonStepStartFailed, Msg: fmt.Sprintf("step %s: writing the prompt file: %v", stepName(in.Step), err),
				Fix: "check that the state folder is writable"}
		}
	}
	out.Argv, err = p.Argv(req)
	if err != nil {
		return Prepared{}, &status.Error{Reason: status.ReasonStepStartFailed, Msg: fmt.Sprintf("step %s: %v", stepName(in.Step), err),
			Fix: fmt.Sprintf("fix steps.%s or providers.%s.args as the message says", stepName(in.Step), name)}
	}
	if !in.ExpandsArgv && slices.ContainsFunc(out.Argv, func(a string) bool { return strings.Contains(a, envRefOpen) }) {
		return Prepared{}, &status.Error{Reason: status.ReasonStepStartFailed,
			Msg: fmt.Sprintf("step %s: %s takes its base URL in its arguments, and this executor cannot pass the one known only at start (%s)", stepName(in.Step), name, spec.Env.BaseURL),
			Fix: fmt.Sprintf("set providers.%s.base_url instead of %s in the step's env, or run without sandbox.egress.inject for this step", name, spec.Env.BaseURL)}
	}
	out.Env = p.Env(req)
	if c, ok := p.(configurer); ok && in.ConfigDir != "" {
		home, _ := os.UserHomeDir()
		env, err := c.attemptConfig(in.ConfigDir, in, home, os.Getenv)
		if err != nil {
			return Prepared{}, &status.Error{Reason: status.ReasonStepStartFailed, Msg: fmt.Sprintf("step %s: %s settings: %v", stepName(in.Step), name, err),
				Fix: "check that the state folder is writable"}
		}
		if len(env) > 0 {
			out.Env, out.ConfigDir = append(out.Env, env...), in.ConfigDir
		}
	}
	if _, described := p.(generic); described && !in.FreshHome {
		// The CLI makes its state folder on first use; in the sandbox it
		// could not (only existing login folders are mounted), so kusaw
		// makes it, private, as the CLI would have on the host.
		for _, lp := range pr.LoginPaths {
			if _, err := os.Lstat(lp); os.IsNotExist(err) {
				_ = os.MkdirAll(lp, 0o700)
			}
		}
	}
	if !in.FreshHome {
		for _, lp := range pr.LoginPaths {
			if _, err := os.Lstat(lp); err == nil {
				out.LoginPaths = append(out.LoginPaths, lp)
			}
		}
	}
	return out, nil
}

// setsEnv reports whether a step env list (NAME or NAME=value) sets name.
func setsEnv(stepEnv []string, name string) bool {
	for _, e := range stepEnv {
		if n, _, _ := strings.Cut(e, "="); n == name {
			return true
		}
	}
	return false
}
