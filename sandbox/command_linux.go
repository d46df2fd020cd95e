//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
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
// plan.Cleanup(). The process leads its own process group (Setpgid): on
// ctx's end the group gets SIGTERM, then SIGKILL after GraceDelay. bwrap's
// --die-with-parent ends the sandboxed tree when bwrap dies, and
// --new-session puts the step in its own session, so a signal to the group
// ends bwrap and with it the whole sandbox.
//
// The environment goes to bwrap through an in-memory file (--args FD) as
// --clearenv and --setenv pairs, so no value shows in /proc/PID/cmdline.
func Command(ctx context.Context, p *Plan, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: no command to run")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	bw, err := FindBwrap()
	if err != nil {
		return nil, err
	}
	if err := p.Prepare(); err != nil {
		return nil, err
	}
	fd, err := argsFile(p.envArgs())
	if err != nil {
		return nil, err
	}
	// ExtraFiles[0] is fd 3 in bwrap; --args comes after --clearenv, which
	// would otherwise clear the variables it sets.
	args := p.Args()
	if !disableUsernsSupported(bw) {
		args = slices.DeleteFunc(args, func(s string) bool { return s == "--unshare-user" || s == "--disable-userns" })
	}
	args = append(args, "--args", "3", "--")
	args = append(args, p.WrapArgv...)
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, bw, args...)
	cmd.Env = []string{} // empty, not inherited; the step's env comes through --args
	cmd.ExtraFiles = []*os.File{fd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = GraceDelay
	return cmd, nil
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
