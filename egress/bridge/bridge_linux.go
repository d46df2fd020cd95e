package bridge

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Run is the bridge (kusaw-bridge, or kusaw __egress-bridge). It runs first in
// the sandbox's private network namespace: it binds the proxy's listener
// on loopback there, hands it to the proxy over the lease's Unix socket,
// and replaces itself with the step's command. With --local it also binds
// each local-service port on the namespace's 127.0.0.1 (and ::1 when the
// namespace has it) and hands those listeners over too: the proxy
// forwards what connects there to the host's loopback port. It returns only on
// failure, and then the step has not started.
func Run(args []string) error { return RunThen(args, nil) }

// RunThen is Run, calling before (when not nil) after the hand-over and
// right before the step's exec, on the goroutine that execs: kusaw-bridge
// applies the confinement stage there (sandbox/confine.Apply), which this
// package does not import. before's error is returned as it is, and the
// step does not start.
func RunThen(args []string, before func() error) error {
	var sock, listen, local string
	var argv []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--lease", "--listen", "--local":
			if i+1 >= len(args) {
				return &Error{ExitHandOver, fmt.Sprintf("egress bridge: %s needs a value (%s)", a, usage)}
			}
			switch a {
			case "--lease":
				sock = args[i+1]
			case "--listen":
				listen = args[i+1]
			default:
				local = args[i+1]
			}
			i++
		case "--":
			argv = args[i+1:]
			i = len(args)
		default:
			return &Error{ExitHandOver, fmt.Sprintf("egress bridge: unknown argument %q (%s)", a, usage)}
		}
	}
	if sock == "" || listen == "" || len(argv) == 0 {
		return &Error{ExitHandOver, "egress bridge: " + usage}
	}
	ap, err := netip.ParseAddrPort(listen)
	if err != nil || !ap.Addr().Is4() || !ap.Addr().IsLoopback() || ap.Port() == 0 {
		return &Error{ExitHandOver, fmt.Sprintf("egress bridge: --listen %q must be 127.x.x.x:PORT", listen)}
	}
	fd, err := listenLoopback(ap)
	if err != nil {
		return &Error{ExitHandOver, fmt.Sprintf("egress bridge: cannot listen on %s in the sandbox: %v", listen, err)}
	}
	locals, err := listenLocal(local)
	if err != nil {
		unix.Close(fd)
		return &Error{ExitHandOver, "egress bridge: " + err.Error()}
	}
	err = HandOver(sock, fd, locals...)
	// The proxy holds its own copies now.
	unix.Close(fd)
	for _, l := range locals {
		unix.Close(l)
	}
	if err != nil {
		return &Error{ExitHandOver, "egress bridge: " + err.Error()}
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return &Error{ExitNotFound, fmt.Sprintf("cannot run %s: not found", argv[0])}
	}
	err = syscall.Exec(path, argv, os.Environ())
	return &Error{ExitNoExec, fmt.Sprintf("cannot run %s: %v", argv[0], err)}
}

// listenLocal binds each local-service port ("5432,7000") on 127.0.0.1
// and, when the namespace has IPv6, on ::1: clients try either for
// localhost.
func listenLocal(list string) ([]int, error) {
	if list == "" {
		return nil, nil
	}
	var fds []int
	fail := func(err error) ([]int, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	for _, s := range strings.Split(list, ",") {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return fail(fmt.Errorf("--local %q: %q is not a port", list, s))
		}
		fd, err := listenLoopback(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(p)))
		if errors.Is(err, unix.EACCES) && p < 1024 {
			// Without privilege a namespace keeps ports below 1024 for
			// root; the step still reaches the service through the proxy.
			fmt.Fprintf(os.Stderr, "kusaw: local service port %d cannot be bound in the sandbox as this user (ports below 1024 need privilege); the step reaches it through the proxy (CONNECT localhost:%d), not straight\n", p, p)
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("cannot listen on local-service port 127.0.0.1:%d in the sandbox: %v", p, err))
		}
		fds = append(fds, fd)
		if fd6, err := listenLoopback6(p); err == nil {
			fds = append(fds, fd6)
		}
	}
	return fds, nil
}

// listenLoopback6 binds [::1]:port, IPv6 only, so it never takes the
// IPv4 port as well.
func listenLoopback6(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	sa := &unix.SockaddrInet6{Port: port, Addr: netip.IPv6Loopback().As16()}
	if err = unix.Bind(fd, sa); err == nil {
		err = unix.Listen(fd, 4096)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// listenLoopback binds a listening socket on ap with close-on-exec, so
// the step never inherits it. If loopback is down (a bare network
// namespace), it tries to bring it up first.
func listenLoopback(ap netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	err = unix.Bind(fd, sa)
	if errors.Is(err, unix.EADDRNOTAVAIL) {
		if uerr := loopbackUp(); uerr != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("loopback is down and cannot be brought up: %v", uerr)
		}
		err = unix.Bind(fd, sa)
	}
	if err == nil {
		err = unix.Listen(fd, 4096)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// loopbackUp sets IFF_UP on lo. bwrap usually does this itself when it
// makes the namespace; a bare unshare does not.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(flags | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// HandOver sends a listening socket (and the local-service listeners) to
// the lease's Unix socket and waits for the proxy's answer ("ok", or
// "error: why"). Plain system calls, not package net: the bridge binary
// stays small.
func HandOver(socketPath string, listenerFD int, localFDs ...int) error {
	c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot reach the egress proxy at %s: %v", socketPath, err)
	}
	defer unix.Close(c)
	tv := unix.NsecToTimeval(Timeout.Nanoseconds())
	_ = unix.SetsockoptTimeval(c, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	_ = unix.SetsockoptTimeval(c, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := connect(c, socketPath); err != nil {
		return fmt.Errorf("cannot reach the egress proxy at %s: %v", socketPath, err)
	}
	if err := unix.Sendmsg(c, []byte(Hello), unix.UnixRights(append([]int{listenerFD}, localFDs...)...), nil, 0); err != nil {
		return fmt.Errorf("sending the listener to the egress proxy: %v", err)
	}
	reply, err := readLine(c)
	if err != nil {
		return fmt.Errorf("the egress proxy did not answer the hand-over: %v", err)
	}
	reply = strings.TrimSpace(reply)
	if reply == "ok" {
		return nil
	}
	return errors.New("the egress proxy refused the hand-over: " + strings.TrimPrefix(reply, "error: "))
}

func connect(fd int, path string) error {
	for {
		err := unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		if err != unix.EINTR {
			return err
		}
	}
}

// readLine reads the proxy's one-line answer (at most 4 KiB).
func readLine(fd int) (string, error) {
	var out []byte
	buf := make([]byte, 512)
	deadline := time.Now().Add(Timeout)
	for len(out) < 4096 {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN || err == unix.EWOULDBLOCK || time.Now().After(deadline) {
			return "", errors.New("i/o timeout")
		}
		if err != nil {
			return "", err
		}
		if n == 0 {
			if len(out) == 0 {
				return "", errors.New("EOF")
			}
			return string(out), nil
		}
		out = append(out, buf[:n]...)
		if i := strings.IndexByte(string(out), '\n'); i >= 0 {
			return string(out[:i+1]), nil
		}
	}
	return string(out), nil
}
