// Package adhoc runs one command under kusaw's default sandbox, without a
// factory file: kusaw sandbox exec -- CMD with the current folder
// writable, no network, the home and the secret store hidden. It needs
// only the sandbox, so kusaw can run it before the packages of its other
// commands initialise (cmd/kusaw/early; docs/benchmarks.md, "Lean start,
// eleventh pass (issue 25)").
package adhoc

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

	"github.com/kusaw/kusaw/internal/allowwrite"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

// killGrace is the time between SIGTERM and SIGKILL, as for attempts.
const killGrace = 10 * time.Second

// Request runs a command without a factory file: the current
// folder writable, no network, the home and the secret store hidden.
type Request struct {
	Argv           []string
	Dir            string // writable; default the current folder
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// start starts the plan's command with req's streams, in its own
// process group.
func start(cmd *exec.Cmd, req Request) error {
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

// Input is the sandbox of kusaw sandbox exec without a factory:
// dir writable, the attempt's folders in tmp, no network, the home and the
// secret store hidden. On Linux tmp is a name under /tmp for folders that
// exist only inside the sandbox (nothing is made on the host); elsewhere
// its folders are created here.
func Input(dir, tmp string) (sandbox.Input, error) {
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

// privateTmp names the temp folder of a sandbox exec on Linux: under
// the sandbox's own /tmp, made by bwrap in memory, never on the host. Only
// the step sees the name, so it need not be unguessable: the runtime's
// generator, not crypto/rand, whose first use costs kusaw 0.06 ms
// (docs/benchmarks.md, "Lean start, eleventh pass (issue 25)").
func privateTmp() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], mrand.Uint64())
	return "/tmp/kusaw-exec-" + hex.EncodeToString(b[:6])
}

// Exec runs req under the default policy and returns the command's
// exit status. The temp folder is removed afterwards. An error other
// than a *WaitError came before anything of the command started.
func Exec(ctx context.Context, req Request) (int, error) {
	if len(req.Argv) == 0 {
		return 0, errors.New("no command to run")
	}
	var ahead *execAheadRun
	defer func() { ahead.stop() }() // an early bwrap not handed over is killed and waited for
	if req.Dir == "" {
		if wd, err := os.Getwd(); err == nil {
			ahead = takeAhead(wd, req.Argv)
		}
	}
	// The remembered check runs beside the plan, which does not need
	// it: the second core is free then (bwrap waits for its options).
	// Its refusal still comes first: a failure before the start waits
	// for it and says why the sandbox cannot run rather than anything
	// else.
	checked := make(chan sandbox.CheckResult, 1)
	go func() { checked <- sandbox.CachedCheck() }()
	var check *sandbox.CheckResult
	fail := func(code status.ExitCode, err error) (int, error) {
		if check == nil {
			res := <-checked
			check = &res
		}
		if !check.Available {
			return int(status.ExitSandboxUnavailable), check.Err()
		}
		return int(code), err
	}
	dir := req.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fail(status.ExitRunFailed, err)
		}
		dir = wd
	}
	home, _ := os.UserHomeDir()
	if err := allowwrite.Check(dir, home); err != nil {
		return fail(status.ExitUsage, fmt.Errorf("the current folder cannot be writable in the sandbox: %v; run sandbox exec from a project folder, or use -f FILE", err))
	}
	var tmp string
	if runtime.GOOS == "linux" {
		tmp = privateTmp()
		if ahead != nil && ahead.tmp != "" {
			tmp = ahead.tmp // the name the early bwrap's command has
		}
	} else {
		t, err := os.MkdirTemp("", "kusaw-exec-")
		if err != nil {
			return fail(status.ExitRunFailed, err)
		}
		defer os.RemoveAll(t)
		tmp = t
	}
	in, err := Input(dir, tmp)
	if err != nil {
		return fail(status.ExitRunFailed, err)
	}
	in.Argv = req.Argv // a script it names outside the view is shown read-only
	plan, err := sandbox.BuildPlan(in)
	if err != nil {
		return fail(status.ExitSandboxUnavailable, err)
	}
	defer plan.Cleanup()
	if code, err := fail(0, nil); err != nil {
		return code, err
	}
	var (
		pid  int
		wait func() (syscall.WaitStatus, error)
	)
	if ahead != nil && ahead.early != nil {
		proc, err := ahead.early.Command(plan, req.Argv, req.Stdin, req.Stdout, req.Stderr)
		if err != nil && !errors.Is(err, sandbox.ErrShapeChanged) {
			return int(status.ExitSandboxUnavailable), err
		}
		if err == nil {
			pid, wait = proc.Pid, proc.Wait
		}
	}
	if wait == nil {
		cmd, err := sandbox.Command(context.Background(), plan, req.Argv)
		if err != nil {
			return int(status.ExitSandboxUnavailable), err
		}
		if err := start(cmd, req); err != nil {
			return int(status.ExitRunFailed), err
		}
		pid, wait = cmd.Process.Pid, func() (syscall.WaitStatus, error) { return cmdWait(cmd) }
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
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(killGrace):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}()
	ws, err := wait()
	close(done)
	if err != nil {
		return int(status.ExitRunFailed), &WaitError{err}
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus(), nil
	case ws.Signaled():
		return 128 + int(ws.Signal()), nil
	}
	return int(status.ExitRunFailed), nil
}

// cmdWait waits for cmd and gives its status; an error is one other than
// how it ended (copying its output).
func cmdWait(cmd *exec.Cmd) (syscall.WaitStatus, error) {
	err := cmd.Wait()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		return 0, err
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws, nil
}

// WaitError is an error of Exec's after the command started: the only
// one that comes when something of the command may have run.
type WaitError struct{ Err error }

func (e *WaitError) Error() string { return e.Err.Error() }
func (e *WaitError) Unwrap() error { return e.Err }
