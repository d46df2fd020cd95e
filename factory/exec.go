package factory

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

// ExecStepID is the id of the step kusaw sandbox exec runs when no step is
// named: the factory's own sandbox policy over every repo. It cannot clash
// with a step of the file (ids start with a letter or digit).
const ExecStepID = "_exec"

// ExecPipeline is the pipeline name recorded for kusaw sandbox exec runs.
const ExecPipeline = record.ExecPipeline

// ExecRequest is one command to run under a step's sandbox.
type ExecRequest struct {
	Step           string // "" for the factory's sandbox policy
	Argv           []string
	Stdout, Stderr io.Writer
	// Network, when set, replaces the step's network (doctor forces
	// allowlist so its egress probes mean something on an open step).
	Network config.Network
	// ExtraAllow adds allowlist entries for this run only, with their own
	// origin (doctor's loopback server: localhost:<port>, origin doctor).
	ExtraAllow []config.AllowedHost
	// SkipSetup leaves the factory's setup commands out (doctor's probes
	// need no npm ci).
	SkipSetup bool
	// Pipeline is the name the run is recorded under; default
	// ExecPipeline (doctor's runs are record.DoctorPipeline).
	Pipeline string
}

// execOptions are what kusaw sandbox exec and doctor ask of their run's
// one attempt: the executor's options, and the setup left out.
type execOptions struct {
	attempt.Options
	skipSetup bool
}

// ExecResult is how it ended.
type ExecResult struct {
	Run     *Run
	Attempt *record.AttemptRecord
	Forced  bool // the step's own mode is off; exec sandboxed it anyway
}

// Exec runs one command as a one-attempt run of a step: the same worktrees,
// sandbox plan, egress lease and records as the step itself, with the
// command in place of the step's own process. It is always sandboxed, even
// when the step's effective mode is off (Forced says so): a sandbox exec
// that ran unsandboxed would show nothing true.
func (e *Engine) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("no command to run")
	}
	var base *config.Step
	if req.Step == "" {
		base = &config.Step{ID: ExecStepID, Attempts: 1}
	} else if base = e.F.Steps[req.Step]; base == nil {
		return nil, fmt.Errorf("%w %q (steps: %v)", record.ErrUnknownStep, req.Step, e.F.StepOrder)
	}
	s := *base
	s.Run = append([]string(nil), req.Argv...)
	s.Builtin, s.Prompt, s.PromptFile = "", "", ""
	s.Attempts, s.PerRepo = 1, false
	sb := config.StepSandbox{}
	if base.Sandbox != nil {
		sb = *base.Sandbox
	}
	res := &ExecResult{}
	if m, _ := e.F.EffectiveMode(base, e.F.ActiveRepos(base)); m != config.ModeRequired {
		res.Forced = true
	}
	sb.Mode = config.ModeRequired
	if req.Network != config.NetworkUnset {
		sb.Network = req.Network
	}
	s.Sandbox = &sb

	name := ExecPipeline
	if req.Pipeline != "" {
		name = req.Pipeline
	}
	r, err := e.prepareSteps(name, []*config.Step{&s}, nil)
	if err != nil {
		return nil, err
	}
	r.exec = execOptions{Options: attempt.Options{Stdout: req.Stdout, Stderr: req.Stderr, ExtraAllow: req.ExtraAllow}, skipSetup: req.SkipSetup}
	e.Execute(ctx, r)
	res.Run = r
	var a record.AttemptRecord
	if err := readJSON(filepath.Join(record.AttemptDir(r.Dir, s.ID, 1), record.AttemptFile), &a); err != nil {
		return res, err
	}
	res.Attempt = &a
	return res, nil
}

// DefaultExecRequest runs a command without a factory file: the current
// folder writable, no network, the home and the secret store hidden.
type DefaultExecRequest struct {
	Argv           []string
	Dir            string // writable; default the current folder
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// startDefault starts the plan's command with req's streams, in its own
// process group.
func startDefault(cmd *exec.Cmd, req DefaultExecRequest) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start the sandbox: %v", err)
	}
	return nil
}

// DefaultExecInput is the sandbox of kusaw sandbox exec without a factory:
// dir writable, the attempt's folders in tmp, no network, the home and the
// secret store hidden. On Linux tmp is a name under /tmp for folders that
// exist only inside the sandbox (nothing is made on the host); elsewhere
// its folders are created here.
func DefaultExecInput(dir, tmp string) (sandbox.Input, error) {
	in := sandbox.Input{
		AttemptDir: tmp,
		TmpDir:     filepath.Join(tmp, "tmp"),
		Workdir:    dir,
		AllowWrite: []string{dir},
		Checkouts:  []string{dir},
		Network:    sandbox.NetworkNone,
	}
	if runtime.GOOS == "linux" {
		// In memory, so bounded: the smaller of an attempt's default disk
		// and half its default memory, so a command cannot fill the
		// machine's memory through it.
		d := proc.Defaults(proc.Limits{})
		in.PrivateTmp, in.PrivateTmpSize = true, min(d.Disk, d.Memory/2)
	} else {
		in.ArtifactsDir = filepath.Join(tmp, "artifacts")
		for _, d := range []string{in.ArtifactsDir, in.TmpDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return in, err
			}
		}
	}
	if h, err := os.UserHomeDir(); err == nil {
		in.Home = h
	}
	if d, err := secretstore.Dir(); err == nil {
		in.HiddenPaths = append(in.HiddenPaths, d)
	}
	return in, nil
}

// privateExecTmp names the temp folder of a sandbox exec on Linux: under
// the sandbox's own /tmp, made by bwrap in memory, never on the host. Only
// the step sees the name, so it need not be unguessable: the runtime's
// generator, not crypto/rand, whose first use costs kusaw 0.06 ms
// (docs/benchmarks.md, "Lean start, eleventh pass (issue 25)").
func privateExecTmp() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], mrand.Uint64())
	return "/tmp/kusaw-exec-" + hex.EncodeToString(b[:6])
}

// ExecDefault runs req under the default policy and returns the command's
// exit status. The temp folder is removed afterwards.
func ExecDefault(ctx context.Context, req DefaultExecRequest) (int, error) {
	if len(req.Argv) == 0 {
		return 0, errors.New("no command to run")
	}
	var ahead *execAheadRun
	defer func() { ahead.stop() }() // an early bwrap not handed over is killed and waited for
	if req.Dir == "" {
		if wd, err := os.Getwd(); err == nil {
			ahead = takeExecAhead(wd, req.Argv)
		}
	}
	if res := sandbox.CachedCheck(); !res.Available {
		return int(status.ExitSandboxUnavailable), res.Err()
	}
	dir := req.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return 0, err
		}
		dir = wd
	}
	if err := config.CheckAllowWrite(dir); err != nil {
		return int(status.ExitUsage), fmt.Errorf("the current folder cannot be writable in the sandbox: %v; run sandbox exec from a project folder, or use -f FILE", err)
	}
	var tmp string
	if runtime.GOOS == "linux" {
		tmp = privateExecTmp()
		if ahead != nil && ahead.tmp != "" {
			tmp = ahead.tmp // the name the early bwrap's command has
		}
	} else {
		t, err := os.MkdirTemp("", "kusaw-exec-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(t)
		tmp = t
	}
	in, err := DefaultExecInput(dir, tmp)
	if err != nil {
		return 0, err
	}
	in.Argv = req.Argv // a script it names outside the view is shown read-only
	plan, err := sandbox.BuildPlan(in)
	if err != nil {
		return int(status.ExitSandboxUnavailable), err
	}
	defer plan.Cleanup()
	var cmd *exec.Cmd
	if ahead != nil && ahead.early != nil {
		cmd, err = ahead.early.Command(plan, req.Argv, req.Stdin, req.Stdout, req.Stderr)
		if err != nil && !errors.Is(err, sandbox.ErrShapeChanged) {
			return int(status.ExitSandboxUnavailable), err
		}
	}
	if cmd == nil {
		if cmd, err = sandbox.Command(context.Background(), plan, req.Argv); err != nil {
			return int(status.ExitSandboxUnavailable), err
		}
		if err := startDefault(cmd, req); err != nil {
			return int(status.ExitRunFailed), err
		}
	}
	if ahead != nil {
		ahead.remember(plan, req.Argv, tmp)
	}
	done := make(chan struct{})
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		select {
		case <-done:
			return
		case <-ctx.Done():
		case <-sigs:
		}
		// Graceful, then forced: the whole group goes.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(DefaultKillGrace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	err = cmd.Wait()
	close(done)
	if ee, ok := err.(interface{ ExitCode() int }); ok && err != nil {
		if c := ee.ExitCode(); c >= 0 {
			return c, nil
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return int(status.ExitRunFailed), nil
	}
	if err != nil {
		return int(status.ExitRunFailed), err
	}
	return 0, nil
}
