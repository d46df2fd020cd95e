//go:build unix

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// checkSystemBinary checks that path is a regular file owned by root and
// writable by nobody else, in a folder that is the same: what sandbox-exec
// must be before kusaw trusts it with a step. It is portable so it is
// tested on Linux.
func checkSystemBinary(path string) error {
	check := func(p, what string, wantDir bool) error {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("%s %s: %v", what, p, err)
		}
		switch {
		case wantDir && !fi.IsDir():
			return fmt.Errorf("%s %s is not a folder", what, p)
		case !wantDir && !fi.Mode().IsRegular():
			return fmt.Errorf("%s %s is not a regular file (a link or something else)", what, p)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s %s: cannot read its owner", what, p)
		}
		if st.Uid != 0 {
			return fmt.Errorf("%s %s is owned by uid %d, not root", what, p, st.Uid)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s %s is writable by group or others (mode %o)", what, p, fi.Mode().Perm())
		}
		return nil
	}
	if err := check(filepath.Dir(path), "folder", true); err != nil {
		return err
	}
	return check(path, filepath.Base(path), false)
}

// KillGroup ends what is left of a finished step's process group: its
// background children. Call it after Wait. On Linux bubblewrap's PID
// namespace does this already; on macOS nothing else does. A child that
// left the group (setsid) is not reached: a documented macOS limit.
func KillGroup(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil || cmd.Process.Pid <= 0 {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
