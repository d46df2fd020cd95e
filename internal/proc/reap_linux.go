package proc

import (
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The reaper: a small supervisor between kusaw and a process that runs
// without a sandbox. The parent-death signal reaches only kusaw's direct
// child, and what that child starts in the background is re-parented to
// init when kusaw dies. The reaper is that direct child: a child
// subreaper (orphans of the process become its children, setsid or not),
// told by its own parent-death signal that kusaw died, and then it kills
// everything below it. Sandboxed processes need none: bubblewrap's PID
// namespace ends with its first process.

// ReapArg is the argument a binary's main passes to MaybeReap.
const ReapArg = "__kusaw_reap"

// reapHeldArg starts the reaper held (hold): it reads one line from the
// file descriptor after it before it starts the process. The reaper is
// the whole kusaw binary, whose start takes milliseconds: held, it makes
// that start while kusaw places it into its cgroup, instead of after a
// /bin/sh that holds it.
const reapHeldArg = "__kusaw_reap_held"

// isReaped reports whether cmd runs under the reaper (Reaped).
func isReaped(cmd *exec.Cmd) bool {
	p, _ := reaperPath.Load().(string)
	return p != "" && cmd.Path == p && len(cmd.Args) >= 3 && cmd.Args[1] == ReapArg
}

// reapDeathSignal is the reaper's parent-death signal: one kusaw never
// sends to a group, so the reaper knows what it means.
const reapDeathSignal = syscall.SIGUSR2

var reaperPath atomic.Value // string

// EnableReaper makes Reaped wrap processes with the binary at path, whose
// main must call MaybeReap first. Tests' binaries leave it off.
func EnableReaper(path string) { reaperPath.Store(path) }

// Reaped rewrites cmd to run under the reaper, when one is enabled and
// cmd's program exists (a missing program still fails to start, as it did
// before).
func Reaped(cmd *exec.Cmd) {
	p, _ := reaperPath.Load().(string)
	if p == "" {
		return
	}
	if fi, err := os.Stat(cmd.Path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return
	}
	cmd.Args = append([]string{p, ReapArg, cmd.Path}, cmd.Args...)
	cmd.Path = p
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = reapDeathSignal
}

// MaybeReap runs the reaper when args (os.Args) ask for it, and then never
// returns.
func MaybeReap(args []string) {
	if len(args) >= 5 && args[1] == reapHeldArg {
		fd, err := strconv.Atoi(args[2])
		if err != nil || fd < 3 {
			os.Exit(126)
		}
		os.Exit(reap(args[3], args[4:], os.NewFile(uintptr(fd), "hold")))
	}
	if len(args) < 4 || args[1] != ReapArg {
		return
	}
	os.Exit(reap(args[2], args[3:], nil))
}

// reap runs the process at path and reaps what it leaves; with held, only
// once a line comes on it (kusaw placed the reaper by then).
func reap(path string, argv []string, held *os.File) int {
	// Signals first: kusaw may die at any moment from here on.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, reapDeathSignal, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	// A parent that died before the signal was set is seen below (ppid 1).
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		os.Stderr.WriteString("kusaw: cannot become a child subreaper: " + err.Error() + "\n")
	}
	if parent == 1 {
		return 137 // kusaw is already gone
	}
	if held != nil {
		// End of file: kusaw gave up on the start (or died); the line's
		// content does not matter.
		var b [1]byte
		n, _ := held.Read(b[:])
		held.Close()
		if n == 0 {
			return 126
		}
	}
	child, err := os.StartProcess(path, argv, &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		os.Stderr.WriteString("kusaw: " + err.Error() + "\n")
		return 127
	}
	go func() {
		for range sigs {
			// The parent-death signal also comes when the kusaw thread
			// that started the reaper exits while kusaw lives on: only a
			// new parent means kusaw is gone.
			if os.Getppid() != parent {
				killBelow()
				_ = syscall.Kill(-syscall.Getpgrp(), syscall.SIGKILL)
				os.Exit(137)
			}
			// SIGTERM and the others reached the whole group, the
			// process included: the reaper waits for it to end.
		}
	}()
	// Reap every child, orphans included, until the process ends.
	var ws syscall.WaitStatus
	for {
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid == child.Pid {
			break
		}
	}
	// What the process left below the reaper (setsid or not) ends with it.
	killBelow()
	if ws.Signaled() {
		signal.Reset(ws.Signal())
		_ = syscall.Kill(os.Getpid(), ws.Signal())
		time.Sleep(100 * time.Millisecond)
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// killBelow kills the reaper's children until none is left: killing one
// re-parents its own children to the reaper.
func killBelow() {
	self := os.Getpid()
	for i := 0; i < 100; i++ {
		kids := childrenOf(self)
		if len(kids) == 0 {
			return
		}
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// childrenOf lists the live (not zombie) children of pid.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == pid {
			out = append(out, p)
		}
	}
	return out
}
