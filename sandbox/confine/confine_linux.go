package confine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Run applies the stage and execs the command; it returns only on failure.
func Run(args []string) error {
	s, err := Parse(args)
	if err != nil {
		return err
	}
	if err := Apply(s.Writable); err != nil {
		return err
	}
	path, err := exec.LookPath(s.Argv[0])
	if err != nil {
		return &Error{ExitNotFound, fmt.Sprintf("cannot run %s: not found", s.Argv[0])}
	}
	err = syscall.Exec(path, s.Argv, os.Environ())
	return &Error{ExitNoExec, fmt.Sprintf("cannot run %s: %v", s.Argv[0], err)}
}

// Apply confines the calling goroutine's thread: no inherited descriptor
// above stderr survives the step's exec (CloseInheritedOnExec), a fresh session
// keyring, then Landlock over writable. It locks the goroutine to its thread for
// good: the keyring and the Landlock domain belong to a thread's
// credentials, and only the exec'ing thread's carry over to the step, so
// the caller's next step is execve on the same goroutine. The egress
// bridge calls it after its hand-over, so an allowlist step's start is
// one program instead of two (kusaw-bridge __confine ... -- kusaw-bridge
// --lease ...).
func Apply(writable []string) error {
	runtime.LockOSThread()
	// bwrap has taken what kusaw gave it; nothing else is the step's.
	if err := CloseInheritedOnExec(); err != nil {
		return &Error{ExitSetup, "confine: " + err.Error()}
	}
	if err := freshKeyring(); err != nil {
		return &Error{ExitSetup, "confine: cannot give the step a session keyring of its own: " + err.Error()}
	}
	if _, err := Landlock(writable); err != nil {
		return &Error{ExitSetup, "confine: " + err.Error()}
	}
	return nil
}

// freshKeyring joins a new anonymous session keyring: the step holds no
// keyring of the host's (whose keys a possessor may read and rewrite) and
// shares none with other attempts. A kernel without keys has nothing to
// share.
func freshKeyring() error {
	_, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	if e == 0 || e == unix.ENOSYS || e == unix.EOPNOTSUPP {
		return nil
	}
	return e
}

// LandlockABI is the kernel's Landlock ABI version, 0 when it has none,
// and why not.
func LandlockABI() (int, error) {
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch e {
	case 0:
		return int(r), nil
	case unix.ENOSYS:
		return 0, errors.New("the kernel was built without Landlock (CONFIG_SECURITY_LANDLOCK)")
	case unix.EOPNOTSUPP:
		return 0, errors.New("Landlock is off on this kernel (add landlock to the lsm= boot parameter)")
	default:
		return 0, fmt.Errorf("asking the kernel for Landlock: %v", e)
	}
}

// Write rights Landlock handles, by the ABI that introduced them. Reads
// are left to the view (what is not mounted does not exist); ioctl on
// devices stays (terminals).
// cmd/kusaw-bridge/stage_cgo.go applies the same rights in C: a change here
// goes there too (TestStageImplementationsAgree compares the two).
const (
	writeV1 = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	fileRights = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
)

// Always writable in the sandbox: the fresh /dev (null, tty, pts, shm)
// and /proc (a program's own settings there; the kernel's ptrace checks
// still guard other processes' files).
var alwaysWritable = []string{"/dev", "/proc"}

// What Landlock applied (for check --verbose and tests).
type Applied struct {
	ABI    int
	Scoped bool // signals and abstract Unix sockets stay inside the sandbox (ABI 6)
}

// Landlock restricts the calling thread (and what it execs) to writing
// beneath writable, plus /dev and /proc, and, from ABI 6 on, to signalling
// and reaching abstract sockets only inside its own domain. A kernel
// without Landlock is no error (ABI 0): the view and seccomp still hold.
// A writable path that cannot be opened is left out: it can then not be
// written, which is the safe side.
func Landlock(writable []string) (Applied, error) {
	abi, _ := LandlockABI()
	if abi < 1 {
		return Applied{}, nil
	}
	handled := uint64(writeV1)
	if abi >= 2 {
		handled |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		handled |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	// The struct as long as the kernel's ABI knows it: 8 bytes up to ABI
	// 3, then the network field, then scopes (ABI 6).
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	size := unsafe.Offsetof(attr.Handled_access_net)
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
		size = unsafe.Offsetof(attr.Quiet_access_fs)
	}
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return Applied{}, fmt.Errorf("landlock: creating the ruleset: %v", e)
	}
	rs := int(r)
	defer unix.Close(rs)
	for _, p := range append(append([]string{}, alwaysWritable...), writable...) {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		allowed := handled
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			allowed &= fileRights
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: allowed, Parent_fd: int32(fd)}
		_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rs), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		unix.Close(fd)
		if e != 0 {
			return Applied{}, fmt.Errorf("landlock: allowing writes beneath %s: %v", p, e)
		}
	}
	// bwrap sets no_new_privs already; Landlock needs it on this thread.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return Applied{}, fmt.Errorf("landlock: no_new_privs: %v", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rs), 0, 0); e != 0 {
		return Applied{}, fmt.Errorf("landlock: restricting: %v", e)
	}
	return Applied{ABI: abi, Scoped: abi >= 6}, nil
}
