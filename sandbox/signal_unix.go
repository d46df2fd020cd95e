//go:build unix && !linux

package sandbox

import (
	"errors"
	"os/exec"
	"syscall"
)

// Signal sends sig to the sandboxed process's group: without a PID
// namespace (macOS) the step is the process kusaw started.
func Signal(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd == nil || cmd.Process == nil {
		return errors.New("sandbox: the command has not started")
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		return syscall.Kill(cmd.Process.Pid, sig)
	}
	return nil
}
