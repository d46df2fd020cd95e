//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// GraceDelay is how long Command's process may take after SIGTERM before
// it is killed.
var GraceDelay = 5 * time.Second

// Command returns the bwrap command that runs argv under the plan. The
// caller sets Stdout/Stderr/Stdin, starts and waits for it, then calls
// plan.Cleanup(). bwrap leads its own process group (Setpgid). On ctx's end
// the processes inside get SIGTERM (Signal), and bwrap SIGKILL after
// GraceDelay; bwrap's --die-with-parent then ends whatever is left inside.
// A signal to bwrap's group alone ends bwrap at once and the step with
// SIGKILL: the step runs in its own session (--new-session), so use Signal
// to give it SIGTERM first.
//
// The environment goes to bwrap through an in-memory file (--args FD) as
// --clearenv and --setenv pairs, so no value shows in /proc/PID/cmdline.
func Command(ctx context.Context, p *Plan, argv []string) (*exec.Cmd, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	st, err := startArgs(p, argv)
	if err != nil {
		return nil, err
	}
	if err := p.Prepare(); err != nil {
		return nil, err
	}
	fd, err := argsFile(st.env)
	if err != nil {
		return nil, err
	}
	seccomp, err := seccompFile()
	if err != nil {
		fd.Close()
		return nil, filterError(err)
	}
	// ExtraFiles[0] is fd 3 in bwrap; --args comes after --clearenv, which
	// would otherwise clear the variables it sets.
	args := append(append(st.opts, "--args", "3", "--"), st.tail...)
	cmd := bwrapCommand(ctx, st.bw, args)
	files, err := dataFiles(fd, st.data, seccomp)
	if err != nil {
		fd.Close()
		seccomp.Close()
		return nil, err
	}
	cmd.ExtraFiles = files
	// A plan with write layers starts as the stage that mounts them and
	// then execs this bwrap (write_layer_linux.go).
	if err := p.wrapLayers(cmd); err != nil {
		closeFiles(files)
		return nil, err
	}
	// Last, once nothing here can fail: a caller whose Command failed
	// may not call Cleanup, and the stand-ins would stay.
	p.takeStandIns()
	return cmd, nil
}

// bwrapStart is what a start gives bwrap, in the parts an early start
// (EarlyStart) fixes at different times: the command and the descriptors
// when bwrap starts, the options and the environment when the plan is
// ready.
type bwrapStart struct {
	bw   string
	opts []string // the plan's options and the kernel filters', without the environment
	env  []string // --setenv pairs: through a file, never on bwrap's command line
	tail []string // after "--": the confinement stage, the plan's wrapper, argv
	data int      // the empty files' descriptors, from DataFD on; the filter's comes next
}

// startArgs is bwrap's start for argv under p.
func startArgs(p *Plan, argv []string) (bwrapStart, error) {
	if len(argv) == 0 {
		return bwrapStart{}, errors.New("sandbox: no command to run")
	}
	bw, err := FindBwrap()
	if err != nil {
		return bwrapStart{}, err
	}
	args := p.Args()
	if !disableUsernsSupported(bw) {
		args = slices.DeleteFunc(args, func(s string) bool { return s == "--unshare-user" || s == "--disable-userns" })
	}
	if !permsSupported(bw) {
		args = withoutPerms(args)
	}
	n := p.dataFiles()
	// The kernel filters read the descriptor after the empty files'.
	args = append(args, filterOpts(DataFD+n)...)
	tail := append(p.confineArgv(), p.WrapArgv...)
	tail = append(tail, argv...)
	return bwrapStart{bw: bw, opts: args, env: p.envArgs(), tail: tail, data: n}, nil
}

// bwrapCommand is the bwrap process of a start, not yet started: its
// group, its death with kusaw, and how it ends on ctx's end.
func bwrapCommand(ctx context.Context, bw string, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bw, args...)
	cmd.Env = []string{} // empty, not inherited; the step's env comes through --args
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		// The step first, so it can end cleanly; bwrap would only die and
		// take the step down with SIGKILL. When nothing of the step runs
		// yet (bwrap or the confinement stage still starting), there is
		// nothing to end cleanly: bwrap goes at once, and
		// --die-with-parent takes whatever it started, rather than a step
		// that starts after the signal running until WaitDelay.
		if signalInner(cmd, syscall.SIGTERM) == 0 {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = GraceDelay
	return cmd
}

// dataFiles is bwrap's descriptors from fd 3 on: args (the --args file),
// n empty files' content, then the seccomp filter.
func dataFiles(args *os.File, n int, seccomp *os.File) ([]*os.File, error) {
	files := []*os.File{args}
	if n > 0 {
		// The empty files' content: /dev/null reads as empty, and each
		// --ro-bind-data takes (and closes) its own descriptor. Its own
		// open per command: callers close ExtraFiles after the start.
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		for i := 0; i < n; i++ {
			files = append(files, null)
		}
	}
	return append(files, seccomp), nil
}

// argsFile returns a sealed in-memory file holding NUL-separated args.
func argsFile(args []string) (*os.File, error) {
	fd, err := unix.MemfdCreate("kusaw-bwrap-args", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "kusaw-bwrap-args")
	var sb strings.Builder
	for _, a := range args {
		sb.WriteString(a)
		sb.WriteByte(0)
	}
	if _, err := f.WriteString(sb.String()); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: memfd: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Signal sends sig to every process running inside cmd's sandbox (the
// descendants of bwrap, seen from outside), not to bwrap itself. bwrap
// does not forward signals, so this is how a step gets a SIGTERM it can
// handle before the sandbox is torn down.
func Signal(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd == nil || cmd.Process == nil {
		return errors.New("sandbox: the command has not started")
	}
	_, err := signalAll(cmd, sig)
	return err
}

// signalInner is Signal, returning how many processes it reached.
func signalInner(cmd *exec.Cmd, sig syscall.Signal) int {
	n, _ := signalAll(cmd, sig)
	return n
}

func signalAll(cmd *exec.Cmd, sig syscall.Signal) (int, error) {
	inner := descendants(cmd.Process.Pid)
	// bwrap's own helper (PID 1 inside) is the first descendant: skip it,
	// its death would kill the step with SIGKILL at once.
	var errs []error
	n := 0
	for i, pid := range inner {
		if i == 0 {
			continue
		}
		err := syscall.Kill(pid, sig)
		if err == nil {
			n++
		} else if err != syscall.ESRCH {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// descendants lists pid's descendants, breadth first, from
// /proc/PID/task/TID/children.
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 && len(out) < 100000 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, t.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
					queue = append(queue, c)
				}
			}
		}
	}
	return out
}
