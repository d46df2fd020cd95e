package peercred

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5; the generic value, which amd64
// and arm64 use): a pidfd of the process that connected, taken when it
// connected, so it cannot name a process that reused the pid.
const soPeerPidfd = 77

// The namespaces a host peer shares with kusaw. The user namespace is the
// one every sandbox has of its own; the PID namespace too, and it still
// tells a sandbox apart where bubblewrap (older than 0.8, as root) could
// not be asked for a user namespace.
var hostNamespaces = []string{"user", "pid"}

var ownNS = sync.OnceValues(func() (map[string]nsID, error) {
	out := map[string]nsID{}
	for _, ns := range hostNamespaces {
		id, err := nsOf("self", ns)
		if err != nil {
			return nil, err
		}
		out[ns] = id
	}
	return out, nil
})

type nsID struct{ dev, ino uint64 }

func nsOf(pid, ns string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/ns/"+ns, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// held is a peer with a pidfd on its process (-1 when the kernel has no
// pidfds: Linux before 5.3).
type held struct {
	Peer
	pidfd int
}

func (h held) close() {
	if h.pidfd >= 0 {
		unix.Close(h.pidfd)
	}
}

// alive reports whether the peer's process still runs: what was read from
// /proc/PID meanwhile was its own. Without a pidfd it cannot be told; the
// reads stand.
func (h held) alive() bool {
	if h.pidfd < 0 {
		return true
	}
	err := unix.PidfdSendSignal(h.pidfd, 0, nil, 0)
	return err == nil || err == unix.EPERM // EPERM: it exists, kusaw may not signal it
}

func hold(c *net.UnixConn) (held, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return held{pidfd: -1}, refused("cannot read the peer's credentials: %v", err)
	}
	var (
		cred   *unix.Ucred
		credEr error
		pidfd  = -1
		fdErr  error
	)
	if err := rc.Control(func(fd uintptr) {
		cred, credEr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		pidfd, fdErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd)
	}); err != nil {
		return held{pidfd: -1}, refused("cannot read the peer's credentials: %v", err)
	}
	if credEr != nil {
		if fdErr == nil {
			unix.Close(pidfd)
		}
		return held{pidfd: -1}, refused("cannot read the peer's credentials (SO_PEERCRED): %v", credEr)
	}
	h := held{Peer: Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, pidfd: -1}
	if h.PID <= 0 {
		if fdErr == nil {
			unix.Close(pidfd)
		}
		return h, refused("the peer (uid %d) runs in a PID namespace kusaw cannot see into (a container or a sandbox)", h.UID)
	}
	switch {
	case fdErr == nil:
		h.pidfd = pidfd
	case errors.Is(fdErr, unix.ENOPROTOOPT) || errors.Is(fdErr, unix.EINVAL):
		// Before Linux 6.5: a pidfd opened now, after the connection. A
		// pid reused in between is caught by the checks below failing,
		// unless the new process would pass them itself.
		fd, err := unix.PidfdOpen(h.PID, 0)
		switch {
		case err == nil:
			h.pidfd = fd
		case errors.Is(err, unix.ESRCH):
			return h, refused("the peer (pid %d) ended before kusaw could check it", h.PID)
		case errors.Is(err, unix.ENOSYS):
			// Before Linux 5.3: no pidfds; the /proc reads alone.
		default:
			return h, refused("cannot hold the peer (pid %d): %v", h.PID, err)
		}
	default:
		return h, refused("cannot read the peer's process (SO_PEERPIDFD, pid %d): %v", h.PID, fdErr)
	}
	return h, nil
}

// HostPeer admits a peer that shares kusaw's own user and PID namespaces:
// a process outside every sandbox. A peer in a sandbox, or one whose
// namespaces kusaw cannot read, is refused.
func HostPeer(c *net.UnixConn) error {
	h, err := hold(c)
	defer h.close()
	if err != nil {
		return err
	}
	return h.host()
}

func (h held) host() error {
	own, err := ownNS()
	if err != nil {
		return refused("cannot read kusaw's own namespaces: %v", err)
	}
	pid := strconv.Itoa(h.PID)
	for _, ns := range hostNamespaces {
		id, err := nsOf(pid, ns)
		if err != nil {
			return refused("cannot read the %s namespace of the peer (pid %d, uid %d): %v; connect as the user kusaw runs as (uid %d)", ns, h.PID, h.UID, unwrap(err), os.Geteuid())
		}
		if id != own[ns] {
			return refused("the peer (pid %d, uid %d) runs in another %s namespace than kusaw: a sandbox, whose steps may not use kusaw's sockets", h.PID, h.UID, ns)
		}
	}
	if !h.alive() {
		return refused("the peer (pid %d) ended while kusaw checked it", h.PID)
	}
	return nil
}

// Descends returns a rule that admits a peer running below the process
// ancestor (its child, grandchild and so on), such as the egress bridge
// below the bubblewrap process kusaw started for one sandbox, and refuses
// every other peer.
func Descends(ancestor int) Rule {
	return func(c *net.UnixConn) error {
		if ancestor <= 1 {
			return refused("no process is named whose descendants may connect")
		}
		h, err := hold(c)
		defer h.close()
		if err != nil {
			return err
		}
		return h.descends(ancestor)
	}
}

// HostOrDescends admits a host peer (HostPeer) or one below ancestor
// (Descends).
func HostOrDescends(ancestor int) Rule {
	return func(c *net.UnixConn) error {
		h, err := hold(c)
		defer h.close()
		if err != nil {
			return err
		}
		if h.host() == nil {
			return nil
		}
		return h.descends(ancestor)
	}
}

// maxDepth bounds the walk up the process tree; a sandbox's processes are
// a few levels below the process kusaw started (bwrap, its init, the
// bridge), and a step's own children deeper still.
const maxDepth = 64

func (h held) descends(ancestor int) error {
	if ancestor <= 1 {
		return refused("no process is named whose descendants may connect")
	}
	pid := h.PID
	for range maxDepth {
		if pid == ancestor {
			if !h.alive() {
				return refused("the peer (pid %d) ended while kusaw checked it", h.PID)
			}
			return nil
		}
		if pid <= 1 {
			break
		}
		pp, err := parentOf(pid)
		if err != nil {
			return refused("cannot follow the peer (pid %d) up its process tree: %v", h.PID, unwrap(err))
		}
		pid = pp
	}
	return refused("the peer (pid %d, uid %d) does not run below the process kusaw started (pid %d)", h.PID, h.UID, ancestor)
}

// parentOf reads a process's parent from /proc/PID/stat: the fourth
// field, counted after the command name's closing parenthesis (the name
// itself may hold spaces and parentheses).
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.Atoi(f[1])
}

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		return se
	}
	return err
}
