package factory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
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
