package peercred

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// HostPeer admits a peer that runs as kusaw's user or as root. macOS has
// no namespaces to tell a sandboxed peer by; its Seatbelt profile denies
// the step every Unix socket outside the attempt.
func HostPeer(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return refused("cannot read the peer's credentials: %v", err)
	}
	var (
		cred *unix.Xucred
		cerr error
	)
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return refused("cannot read the peer's credentials: %v", err)
	}
	if cerr != nil {
		return refused("cannot read the peer's credentials (LOCAL_PEERCRED): %v", cerr)
	}
	if int(cred.Uid) != os.Geteuid() && cred.Uid != 0 {
		return refused("the peer runs as uid %d; kusaw's sockets serve uid %d and root", cred.Uid, os.Geteuid())
	}
	return nil
}

// Descends refuses every peer: only Linux sandboxes hand a listener over.
func Descends(ancestor int) Rule {
	return func(*net.UnixConn) error {
		return refused("only a Linux sandbox's bridge hands over a listener")
	}
}

// HostOrDescends is HostPeer: only Linux sandboxes hand a listener over.
func HostOrDescends(ancestor int) Rule { return HostPeer }
