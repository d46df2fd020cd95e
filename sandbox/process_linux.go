//go:build linux

package sandbox

import (
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Process is a bwrap started by startProcess rather than os/exec: the
// first os.StartProcess of a process forks a test child to see whether
// pidfds work, about 0.12 ms on the path of kusaw sandbox exec before
// bwrap can start (docs/benchmarks.md, "Lean start, twelfth pass (issue
// 25)"). Kill never signals its id once Wait has reaped it.
type Process struct {
	Pid int

	waitOnce sync.Once
	mu       sync.Mutex // held while reaping; reaped says it is done
	reaped   bool
	status   syscall.WaitStatus
	err      error
}

// startProcess starts argv[0] (a path) with argv and no environment, in
// a process group of its own and killed when this thread ends (as
// bwrapCommand's), files as its descriptors from 0 on (nil: /dev/null).
func startProcess(argv []string, files []*os.File) (*Process, error) {
	var null *os.File
	fds := make([]uintptr, len(files))
	for i, f := range files {
		if f == nil {
			if null == nil {
				n, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
				if err != nil {
					return nil, err
				}
				defer n.Close()
				null = n
			}
			f = null
		}
		fds[i] = f.Fd()
	}
	pid, _, err := syscall.StartProcess(argv[0], argv, &syscall.ProcAttr{
		Env:   []string{},
		Files: fds,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	runtime.KeepAlive(files)
	if err != nil {
		return nil, &os.PathError{Op: "fork/exec", Path: argv[0], Err: err}
	}
	return &Process{Pid: pid}, nil
}

// Wait waits for the process to end and reaps it; every call gives the
// same status. It waits without reaping first, so that Kill, which takes
// the same lock, cannot signal an id the kernel has given to another.
func (p *Process) Wait() (syscall.WaitStatus, error) {
	p.waitOnce.Do(func() {
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for {
			_, err := syscall.Wait4(p.Pid, &p.status, 0, nil)
			if err != syscall.EINTR {
				p.err = err
				break
			}
		}
		p.reaped = true
	})
	return p.status, p.err
}

// Kill sends it SIGKILL, unless it was reaped.
func (p *Process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return os.ErrProcessDone
	}
	return syscall.Kill(p.Pid, syscall.SIGKILL)
}
