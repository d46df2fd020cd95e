package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// BridgeError is a failure of the bridge before the step runs. Code is
// the exit status the bridge ends with.
type BridgeError struct {
	Code int
	Msg  string
}

func (e *BridgeError) Error() string { return e.Msg }

// Exit statuses of the bridge when the step could not start.
const (
	BridgeExitHandOver = 125 // the listener could not be set up or handed over
	BridgeExitNoExec   = 126 // the command exists but cannot be run
	BridgeExitNotFound = 127 // the command is not on PATH
)

const bridgeUsage = "usage: kusaw __egress-bridge --lease SOCKET --listen 127.0.0.1:PORT -- COMMAND [ARG...]"

// RunBridge is the hidden command kusaw __egress-bridge. It runs first in
// the sandbox's private network namespace: it binds the proxy's listener
// on loopback there, hands it to the proxy over the lease's Unix socket,
// and replaces itself with the step's command. It returns only on
// failure, and then the step has not started.
func RunBridge(args []string) error {
	var sock, listen string
	var argv []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--lease", "--listen":
			if i+1 >= len(args) {
				return &BridgeError{BridgeExitHandOver, fmt.Sprintf("egress bridge: %s needs a value (%s)", a, bridgeUsage)}
			}
			if a == "--lease" {
				sock = args[i+1]
			} else {
				listen = args[i+1]
			}
			i++
		case "--":
			argv = args[i+1:]
			i = len(args)
		default:
			return &BridgeError{BridgeExitHandOver, fmt.Sprintf("egress bridge: unknown argument %q (%s)", a, bridgeUsage)}
		}
	}
	if sock == "" || listen == "" || len(argv) == 0 {
		return &BridgeError{BridgeExitHandOver, "egress bridge: " + bridgeUsage}
	}
	ap, err := netip.ParseAddrPort(listen)
	if err != nil || !ap.Addr().Is4() || !ap.Addr().IsLoopback() || ap.Port() == 0 {
		return &BridgeError{BridgeExitHandOver, fmt.Sprintf("egress bridge: --listen %q must be 127.x.x.x:PORT", listen)}
	}
	fd, err := listenLoopback(ap)
	if err != nil {
		return &BridgeError{BridgeExitHandOver, fmt.Sprintf("egress bridge: cannot listen on %s in the sandbox: %v", listen, err)}
	}
	err = HandOver(sock, fd)
	unix.Close(fd) // the proxy holds its own copy now
	if err != nil {
		return &BridgeError{BridgeExitHandOver, "egress bridge: " + err.Error()}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return &BridgeError{BridgeExitNotFound, fmt.Sprintf("cannot run %s: not found", argv[0])}
	}
	err = syscall.Exec(path, argv, os.Environ())
	return &BridgeError{BridgeExitNoExec, fmt.Sprintf("cannot run %s: %v", argv[0], err)}
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
