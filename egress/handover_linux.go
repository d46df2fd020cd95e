package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/egress/bridge"
)

// The hand-over's greeting and time limit are the bridge's.
const (
	handOverHello   = bridge.Hello
	handOverTimeout = bridge.Timeout
)

// listenHandOver opens the lease's Unix socket and waits, in the
// background, for the bridge's listener.
func (l *Lease) listenHandOver() error {
	path := filepath.Join(l.c.SocketDir, "egress.sock")
	if len(path) > 107 {
		return fmt.Errorf("egress lease: the socket path %s is longer than 107 bytes (the Unix limit); use a shorter SocketDir", path)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path) // a stale socket of an earlier lease
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("egress lease: cannot listen on %s: %v", path, err)
	}
	os.Chmod(path, 0o600)
	l.sockPath, l.unixLn = path, ln
	l.wg.Add(1)
	go l.acceptHandOver()
	return nil
}

// acceptHandOver takes hand-overs until one succeeds, then closes the
// socket: nothing in the sandbox can hand over a second listener.
func (l *Lease) acceptHandOver() {
	defer l.wg.Done()
	for {
		c, err := l.unixLn.AcceptUnix()
		if err != nil {
			return
		}
		if err := l.checkPeer(c); err != nil {
			msg := "refused the peer: " + err.Error()
			// Its message first (descriptors closed unused), so the
			// peer reads the answer rather than a broken pipe.
			discardHandOver(c)
			fmt.Fprintf(c, "error: %s\n", msg)
			l.record(Decision{Kind: KindHandOver, Decision: Fail, Reason: "handover.failed", Detail: "kusaw: egress hand-over: " + msg})
			c.Close()
			continue
		}
		ok := l.handOver(c)
		c.Close()
		if ok {
			return
		}
	}
}

// discardHandOver reads one hand-over message, briefly, and closes the
// descriptors that came with it.
func discardHandOver(c *net.UnixConn) {
	c.SetDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4*(1+2*MaxLocalPorts)))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
	}
}

func (l *Lease) handOver(c *net.UnixConn) bool {
	c.SetDeadline(time.Now().Add(handOverTimeout))
	fail := func(msg string) bool {
		fmt.Fprintf(c, "error: %s\n", msg)
		l.record(Decision{Kind: KindHandOver, Decision: Fail, Reason: "handover.failed", Detail: "kusaw: egress hand-over: " + msg})
		return false
	}
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4*(1+2*MaxLocalPorts)))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail(fmt.Sprintf("reading the hand-over: %v", err))
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if len(fds) == 0 {
		return fail("no listening socket came with the hand-over")
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if string(buf[:n]) != handOverHello {
		closeAll()
		return fail("the bridge speaks another hand-over version; use the same kusaw binary for the proxy and the bridge")
	}
	// The first is the proxy's listener; the others are local-service
	// listeners, each on a leased port, on 127.0.0.1 or ::1.
	if err := l.checkListenerFD(fds[0]); err != nil {
		closeAll()
		return fail(err.Error())
	}
	ports := make([]int, len(fds))
	for i, fd := range fds[1:] {
		p, err := l.checkLocalFD(fd)
		if err != nil {
			closeAll()
			return fail(err.Error())
		}
		ports[i+1] = p
	}
	lns := make([]net.Listener, 0, len(fds))
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "egress-listener")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			for _, fd := range fds[i+1:] {
				unix.Close(fd)
			}
			for _, ln := range lns {
				ln.Close()
			}
			return fail(fmt.Sprintf("using the listener: %v", err))
		}
		lns = append(lns, ln)
	}
	for i, ln := range lns[1:] {
		if !l.addLocalListener(ln, ports[i+1]) {
			for _, ln := range lns {
				ln.Close()
			}
			return fail("the lease is closed")
		}
	}
	// Checked: the hand-over socket goes before the lease is ready, so
	// nothing can hand over a second listener once the step may run.
	l.unixLn.Close()
	if !l.addListener(lns[0]) {
		return fail("the lease is closed")
	}
	if _, err := c.Write([]byte("ok\n")); err != nil {
		// The bridge will not start the step; stop serving its listeners.
		for _, ln := range lns {
			ln.Close()
		}
		return false
	}
	return true
}

// checkLocalFD accepts a listening TCP socket on 127.0.0.1 or ::1 whose
// port is one of the lease's local-service ports, and returns the port.
func (l *Lease) checkLocalFD(fd int) (int, error) {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || v != unix.SOCK_STREAM {
		return 0, errors.New("a handed-over local-service descriptor is not a stream socket")
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		return 0, errors.New("a handed-over local-service socket is not listening")
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return 0, fmt.Errorf("a handed-over local-service socket: %v", err)
	}
	var port int
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		if netip.AddrFrom4(a.Addr) != netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
			return 0, errors.New("a handed-over local-service socket is not on 127.0.0.1")
		}
		port = a.Port
	case *unix.SockaddrInet6:
		if netip.AddrFrom16(a.Addr) != netip.IPv6Loopback() {
			return 0, errors.New("a handed-over local-service socket is not on ::1")
		}
		port = a.Port
	default:
		return 0, errors.New("a handed-over local-service socket is not TCP")
	}
	if !slices.Contains(l.localPorts, port) {
		return 0, fmt.Errorf("a handed-over local-service socket is on port %d, which no local-service entry lists", port)
	}
	return port, nil
}

// checkListenerFD accepts only a listening TCP socket on the lease's
// loopback address: a connected socket or a file would make no sense.
func (l *Lease) checkListenerFD(fd int) error {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || v != unix.SOCK_STREAM {
		return errors.New("the handed-over descriptor is not a stream socket")
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || v != unix.AF_INET {
		return errors.New("the handed-over socket is not an IPv4 socket")
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		return errors.New("the handed-over socket is not listening")
	}
	sa, err := unix.Getsockname(fd)
	in4, ok := sa.(*unix.SockaddrInet4)
	want := netip.MustParseAddrPort(l.listenAddr)
	if err != nil || !ok || netip.AddrFrom4(in4.Addr) != want.Addr() || in4.Port != int(want.Port()) {
		return fmt.Errorf("the handed-over socket is not bound to %s", l.listenAddr)
	}
	return nil
}

func unwrapSyscall(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}
