//go:build linux && amd64

package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/internal/bridgebuild"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// The C stage runs from the program's entry point (on amd64; elsewhere
// glibc's constructor runs it), before the C library starts, and leaves a
// failure to the C library's constructor to report (stage_cgo.go). Built with the stack protector on every function
// (the default of some distributions; its canary lives in thread-local
// storage, which is not set up at the entry point), the stage must still
// run the step before the C library starts (traced: no arch_prctl, which
// glibc's start-up makes to set up that storage, before the step's
// execve), and its failures must still be reported, by the constructor.
func TestCStageRunsBeforeTheCLibrary(t *testing.T) {
	needStaticCC(t, "the C stage cannot be built")
	t.Setenv("CGO_CFLAGS", "-O2 -g -fstack-protector-all")
	bin := filepath.Join(t.TempDir(), "kusaw-bridge")
	if err := bridgebuild.Build("", bin, true); err != nil {
		t.Fatal(err)
	}
	stage := append([]string{bin, confine.Subcommand}, confine.Args([]string{t.TempDir()})...)
	calls, code := traceUntilExec(t, append(stage, "/bin/true")...)
	if code != -1 || !slices.Contains(calls, unix.SYS_EXECVE) || slices.Contains(calls, unix.SYS_ARCH_PRCTL) {
		t.Errorf("the stage's system calls before the step's execve: %v (exit %d): want the execve and no arch_prctl", calls, code)
	}
	calls, code = traceUntilExec(t, append(stage, "no-such-program-here")...)
	if code != confine.ExitNotFound || !slices.Contains(calls, unix.SYS_ARCH_PRCTL) {
		t.Errorf("a command not found: exit %d, system calls %v: want exit %d, reported once the C library started", code, calls, confine.ExitNotFound)
	}
	out, _ := exec.Command(append(stage, "no-such-program-here")[0], append(stage, "no-such-program-here")[1:]...).CombinedOutput()
	if want := "kusaw: cannot run no-such-program-here: not found\n"; string(out) != want {
		t.Errorf("a command not found says %q, want %q", out, want)
	}
}

// traceUntilExec runs argv under ptrace and returns the system calls it
// makes until it execs another program (then it lets it go and returns
// exit -1) or ends (with its exit status).
func traceUntilExec(t *testing.T, argv ...string) ([]int, int) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		t.Fatalf("tracing %v: %v %v", argv, err, ws)
	}
	if err := unix.PtraceSetOptions(pid, unix.PTRACE_O_TRACESYSGOOD|unix.PTRACE_O_TRACEEXEC|unix.PTRACE_O_EXITKILL); err != nil {
		t.Fatal(err)
	}
	var calls []int
	for {
		if err := unix.PtraceSyscall(pid, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatal(err)
		}
		switch {
		case ws.Exited():
			cmd.Wait()
			return calls, ws.ExitStatus()
		case ws.Stopped() && ws.TrapCause() == unix.PTRACE_EVENT_EXEC:
			unix.PtraceDetach(pid)
			cmd.Wait()
			return calls, -1
		case ws.Stopped() && ws.StopSignal() == syscall.SIGTRAP|0x80:
			var regs unix.PtraceRegs
			if err := unix.PtraceGetRegs(pid, &regs); err != nil {
				t.Fatal(err)
			}
			if nr := int(regs.Orig_rax); len(calls) == 0 || calls[len(calls)-1] != nr {
				calls = append(calls, nr)
			}
		}
	}
}
