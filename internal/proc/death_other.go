//go:build !linux

package proc

import "syscall"

// setDeathSignal: only Linux has a parent-death signal. Elsewhere the
// process group is killed when kusaw sees the process end, and a step left
// by a kill -9 of kusaw is found by crash recovery.
func setDeathSignal(*syscall.SysProcAttr) {}
