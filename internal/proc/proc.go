package proc

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultGrace is the time between SIGTERM and SIGKILL when the caller
// gives none.
const DefaultGrace = 10 * time.Second

// pipeDrain is how long the output copies may run on after the group is
// gone: a process that left the group (setsid) may still hold the pipes.
const pipeDrain = 2 * time.Second

// Options say how to run one process.
type Options struct {
	// Grace is the time between SIGTERM and SIGKILL when ctx ends.
	Grace time.Duration
	// Stdout and Stderr receive the process's output (nil: discarded).
	Stdout, Stderr io.Writer
	// Copy copies one output stream; nil is io.Copy. kusaw passes its
	// secret redactor here.
	Copy func(dst io.Writer, src io.Reader) error
	// Started is called with the pid once the process runs.
	Started func(pid int)
	// Limits bound the process and all it starts; Name names its cgroup
	// (unique among kusaw's running processes).
	Limits Limits
	Name   string
}

// Result is how one process ended.
type Result struct {
	// StartErr: the process did not start (or its state is unknown).
	StartErr error
	// HasExit: it exited on its own with Exit; otherwise Signal ended it
	// and Exit is 128+signal, as a shell reports it.
	HasExit bool
	Exit    int
	Signal  string
	Dur     time.Duration
	// Stopped: Run signalled it because ctx ended.
	Stopped bool
	// Limit names the limit the process reached (LimitPids, ...), "" none.
	Limit string
}

// Describe says how the process ended, for messages.
func (r Result) Describe() string {
	if r.Signal != "" {
		return "signal " + r.Signal
	}
	return fmt.Sprintf("exit code %d", r.Exit)
}

// Run starts cmd as the leader of its own process group, copies its output
// and waits. When ctx ends the group gets SIGTERM, then SIGKILL after
// o.Grace. Whatever is left of the group when the leader exits is killed.
func Run(ctx context.Context, cmd *exec.Cmd, o Options) Result {
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Copy == nil {
		o.Copy = func(dst io.Writer, src io.Reader) error { _, err := io.Copy(dst, src); return err }
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// If kusaw dies (kill -9), the process dies with it instead of running
	// on unrecorded.
	setDeathSignal(cmd.SysProcAttr)
	cmd.Stdin = nil
	// Our own pipes, not exec's: Wait then returns when the process exits,
	// even if something it started still holds the pipe.
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{StartErr: err}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return Result{StartErr: err}
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	start := time.Now()
	if ctx.Err() != nil {
		closeAll(outR, outW, errR, errW)
		return Result{StartErr: ctx.Err()}
	}
	// Placed in its cgroup and under its rlimits before its program runs.
	var g *group
	var missing []string
	release := func() {}
	if o.Limits.hasAny() {
		g, missing = newGroup(o.groupName(), o.Limits, o.Name == "")
		if o.Limits.Pids > 0 || o.Limits.Memory > 0 || o.Limits.CPU > 0 || o.Limits.Disk > 0 {
			if rel, herr := hold(cmd); herr == nil {
				release = rel
			}
		}
	}
	err = cmd.Start()
	closeAll(outW, errW)
	for _, f := range cmd.ExtraFiles {
		if f != nil {
			f.Close() // the child has its copy (the sandbox's --args memfd)
		}
	}
	if err != nil {
		release()
		closeAll(outR, errR)
		if g != nil {
			g.close()
		}
		return Result{StartErr: err}
	}
	pgid := cmd.Process.Pid
	if o.Limits.hasAny() {
		if g != nil {
			if err := g.add(pgid); err != nil {
				missing = append(missing, wanted(o.Limits)...)
			}
		}
		rlimitsFor(pgid, o.Limits, missing)
	}
	release()
	var hit atomic.Value
	reached := func(name string) {
		if hit.CompareAndSwap(nil, name) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	capOut := &outputCap{max: o.Limits.Output, over: func() { reached(LimitOutput) }}
	stdout, stderr := capOut.wrap(o.Stdout), capOut.wrap(o.Stderr)
	stopDisk := make(chan struct{})
	go watchDisk(o.Limits, stopDisk, func() { reached(LimitDisk) })
	if o.Started != nil {
		o.Started(pgid)
	}
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); _ = o.Copy(stdout, outR) }()
	go func() { defer copies.Done(); _ = o.Copy(stderr, errR) }()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	stopped := false
	select {
	case werr = <-waited:
	case <-ctx.Done():
		stopped = true
		werr = stop(pgid, o.Grace, waited)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	close(stopDisk)
	limit, _ := hit.Load().(string)
	if g != nil {
		if limit == "" {
			limit = g.hit()
		}
		// Every process of the group goes, also one that left the
		// process group (setsid), and the group with them.
		g.close()
	}
	done := make(chan struct{})
	go func() { copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(pipeDrain):
		closeAll(outR, errR)
		<-done
	}
	closeAll(outR, errR)
	res := Result{Dur: time.Since(start), Stopped: stopped, Limit: limit}
	st := cmd.ProcessState
	if st == nil {
		res.StartErr = werr
		return res
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal().String()
		res.Exit = 128 + int(ws.Signal())
	} else {
		res.Exit = st.ExitCode()
		res.HasExit = true
	}
	return res
}

// stop sends the group SIGTERM, then SIGKILL once grace has passed, and
// returns what Wait said.
func stop(pgid int, grace time.Duration, waited <-chan error) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-waited:
		return err
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-waited
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func (l Limits) hasAny() bool {
	return l.Pids > 0 || l.Memory > 0 || l.CPU > 0 || l.Output > 0 || l.Disk > 0
}

var groupSeq atomic.Int64

// groupName is the process's cgroup: its own name, or one from kusaw's pid
// and a counter.
func (o Options) groupName() string {
	if o.Name != "" {
		return o.Name
	}
	return fmt.Sprintf("kusaw-%d-%d", os.Getpid(), groupSeq.Add(1))
}
