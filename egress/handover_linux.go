package egress

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// handOverHello opens the message that carries the listener; the version
// lets a newer proxy refuse an older bridge clearly.
const handOverHello = "kusaw-egress-handover 1\n"

const handOverTimeout = 10 * time.Second

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
		ok := l.handOver(c)
		c.Close()
		if ok {
			l.unixLn.Close()
			return
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
	oob := make([]byte, unix.CmsgSpace(4*4))
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
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	fd := fds[0]
	if string(buf[:n]) != handOverHello {
		unix.Close(fd)
		return fail("the bridge speaks another hand-over version; use the same kusaw binary for the proxy and the bridge")
	}
	if err := l.checkListenerFD(fd); err != nil {
		unix.Close(fd)
		return fail(err.Error())
	}
	f := os.NewFile(uintptr(fd), "egress-listener")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fail(fmt.Sprintf("using the listener: %v", err))
	}
	if !l.addListener(ln) {
		return fail("the lease is closed")
	}
	if _, err := c.Write([]byte("ok\n")); err != nil {
		// The bridge will not start the step; stop serving its listener.
		ln.Close()
		return false
	}
	return true
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

// HandOver sends a listening socket to the lease's Unix socket and waits
// for the proxy's answer. The bridge uses it; so can a test.
func HandOver(socketPath string, listenerFD int) error {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketPath, Net: "unix"})
	if err != nil {
		return fmt.Errorf("cannot reach the egress proxy at %s: %v", socketPath, unwrapSyscall(err))
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(handOverTimeout))
	if _, _, err := c.WriteMsgUnix([]byte(handOverHello), unix.UnixRights(listenerFD), nil); err != nil {
		return fmt.Errorf("sending the listener to the egress proxy: %v", unwrapSyscall(err))
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the egress proxy did not answer the hand-over: %v", unwrapSyscall(err))
	}
	reply = strings.TrimSpace(reply)
	if reply == "ok" {
		return nil
	}
	return errors.New("the egress proxy refused the hand-over: " + strings.TrimPrefix(reply, "error: "))
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
