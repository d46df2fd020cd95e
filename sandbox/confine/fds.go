//go:build unix

package confine

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Descriptors are an allow list too: a process that starts a step (kusaw,
// kusaw-daemon, kusaw-bridge, this stage) inherits whatever its parent
// left open without close-on-exec, and neither Go's os/exec nor bwrap
// closes it, so a harness's descriptor would reach the step, which could
// read or write it. CloseInheritedOnExec marks every descriptor above stderr
// close-on-exec: the step sees 0, 1 and 2, and what a process then passes
// on purpose (exec.Cmd.ExtraFiles, or a flag cleared on one descriptor, as
// the hand-over to kusaw-daemon does) and nothing else. Marked rather than
// closed: the process itself may still read what it was given (the
// daemon's spec, the reaper's hold).

// CloseInheritedOnExec marks every descriptor from 3 on close-on-exec: with
// close_range where the kernel has its CLOSE_RANGE_CLOEXEC (Linux 5.11),
// else one by one from the list of open descriptors.
func CloseInheritedOnExec() error {
	if closeRangeCloexec() == nil {
		return nil
	}
	return cloexecListed(fdDir)
}

// cloexecListed marks each descriptor from 3 on that dir lists (the
// process's own: /proc/self/fd, /dev/fd) close-on-exec.
func cloexecListed(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cannot mark inherited descriptors close-on-exec: listing %s: %v (kusaw needs close_range, Linux 5.11, or %s)", dir, err, dir)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// EBADF: the listing's own descriptor, closed since.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("cannot mark inherited descriptor %d close-on-exec: %v", fd, err)
		}
	}
	return nil
}
