package proc

import "syscall"

// setDeathSignal makes the kernel kill the process when kusaw dies
// (kill -9), instead of leaving it running unrecorded.
func setDeathSignal(a *syscall.SysProcAttr) {
	if a.Pdeathsig == 0 {
		a.Pdeathsig = syscall.SIGKILL
	}
}
