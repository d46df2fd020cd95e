package peercred

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The test binary is its own peer: with PEERCRED_DIAL set it connects to
// that socket, prints the server's one-line answer and exits.
func TestMain(m *testing.M) {
	if p := os.Getenv("PEERCRED_DIAL"); p != "" {
		c, err := net.Dial("unix", p)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(0)
		}
		if os.Getenv("PEERCRED_NOWAIT") != "" {
			os.Exit(0)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print(strings.TrimSpace(line))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveOnce listens, lets rule judge one connection and answers "ok" or
// the refusal.
func serveOnce(t *testing.T, rule Rule) (string, chan error) {
	t.Helper()
	return serveOnceIn(t, t.TempDir(), rule)
}

func serveOnceIn(t *testing.T, dir string, rule Rule) (string, chan error) {
	t.Helper()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(sock), 0o755)
	os.Chmod(sock, 0o777)
	t.Cleanup(func() { ln.Close() })
	got := make(chan error, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		err = rule(c)
		if err != nil {
			fmt.Fprintf(c, "refused: %v\n", err)
		} else {
			fmt.Fprintln(c, "ok")
		}
		got <- err
	}()
	return sock, got
}

// dial runs the test binary as a peer with attr (namespaces, credentials).
func dial(t *testing.T, sock string, attr *syscall.SysProcAttr) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PEERCRED_DIAL="+sock)
	cmd.SysProcAttr = attr
	out, err := cmd.Output()
	if err != nil || strings.HasPrefix(string(out), "dial:") {
		t.Fatalf("the peer did not run (%v): %s", err, out)
	}
	return cmd, string(out)
}

func userNS() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}}
}

// Twin: a process of the host (kusaw's own namespaces) is admitted.
func TestHostPeerAdmitsHostProcess(t *testing.T) {
	sock, got := serveOnce(t, HostPeer)
	_, out := dial(t, sock, nil)
	if err := <-got; err != nil || out != "ok" {
		t.Fatalf("a host process was refused: %v (%q)", err, out)
	}
}

// The attack: a peer in a user namespace of its own (what every sandbox
// has) is refused, and told why.
func TestHostPeerRefusesOtherUserNamespace(t *testing.T) {
	sock, got := serveOnce(t, HostPeer)
	_, out := dial(t, sock, userNS())
	err := <-got
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "another user namespace") {
		t.Fatalf("a peer in another user namespace: %v (%q)", err, out)
	}
	if !strings.HasPrefix(out, "refused: ") {
		t.Fatalf("the peer was not told: %q", out)
	}
}

// A peer in a PID namespace of its own (a sandbox where bubblewrap could
// not make a user namespace) is refused too. Needs root (CLONE_NEWPID).
func TestHostPeerRefusesOtherPIDNamespace(t *testing.T) {
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if os.Geteuid() != 0 {
		attr = userNS()
		attr.Cloneflags |= syscall.CLONE_NEWPID
	}
	sock, got := serveOnce(t, HostPeer)
	dial(t, sock, attr)
	err := <-got
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("a peer in another PID namespace: %v", err)
	}
}

// As root, a peer of another user in the host's namespaces is a host peer
// (the socket's own mode decides who may connect).
func TestHostPeerOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a peer as uid 65534; TestHostPeerAdmitsHostProcess covers the unprivileged case")
	}
	// The test binary in a folder uid 65534 can enter.
	dir, err := os.MkdirTemp("", "peercred-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "peer")
	b, err := os.ReadFile(os.Args[0])
	if err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	sock, got := serveOnceIn(t, dir, HostPeer)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "PEERCRED_DIAL="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	o, err := cmd.Output()
	out := string(o)
	if err != nil || strings.HasPrefix(out, "dial:") {
		t.Fatalf("the peer as uid 65534 did not run (%v): %s", err, out)
	}
	if err := <-got; err != nil || out != "ok" {
		t.Fatalf("uid 65534 on the host was refused: %v (%q)", err, out)
	}
}

// Descends admits the child of the named process, even in a namespace of
// its own (the bridge below bwrap), and refuses the same peer when another
// process is named (another attempt's sandbox).
func TestDescends(t *testing.T) {
	sock, got := serveOnce(t, Descends(os.Getpid()))
	_, out := dial(t, sock, userNS())
	if err := <-got; err != nil || out != "ok" {
		t.Fatalf("a child in its own user namespace, below the named process: %v (%q)", err, out)
	}

	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	sock, got = serveOnce(t, Descends(other.Process.Pid))
	dial(t, sock, userNS())
	err := <-got
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "does not run below") {
		t.Fatalf("a peer below another process: %v", err)
	}
	if err := Descends(1)(nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("Descends(1) admits: %v", err)
	}
}

// HostOrDescends: a host peer, or one below the named process.
func TestHostOrDescends(t *testing.T) {
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	sock, got := serveOnce(t, HostOrDescends(other.Process.Pid))
	if _, out := dial(t, sock, nil); <-got != nil {
		t.Fatalf("a host peer was refused: %q", out)
	}
	sock, got = serveOnce(t, HostOrDescends(other.Process.Pid))
	dial(t, sock, userNS())
	if err := <-got; !errors.Is(err, ErrRefused) {
		t.Fatalf("a sandboxed peer below another process was admitted: %v", err)
	}
}

// A peer that has ended before kusaw checks it is refused: its pid may
// already be another process's.
func TestHostPeerRefusesEndedPeer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The peer connects and exits without waiting for an answer.
	peer := exec.Command(os.Args[0], "-test.run=^$")
	peer.Env = append(os.Environ(), "PEERCRED_DIAL="+sock, "PEERCRED_NOWAIT=1")
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer.Wait() // ended and reaped
	if err := HostPeer(c); !errors.Is(err, ErrRefused) {
		t.Fatalf("a peer that has ended was admitted: %v", err)
	}
}

// Listener hands refused connections to refuse and returns only admitted
// ones.
func TestListener(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	refusedc := make(chan error, 1)
	ln := Listener(ul, HostPeer, func(c net.Conn, err error) {
		fmt.Fprintf(c, "refused: %v\n", err)
		c.Close()
		refusedc <- err
	})
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	_, out := dial(t, sock, userNS())
	if err := <-refusedc; !errors.Is(err, ErrRefused) || !strings.HasPrefix(out, "refused:") {
		t.Fatalf("refusal: %v %q", err, out)
	}
	select {
	case c := <-accepted:
		t.Fatalf("the refused peer was accepted: %v", c.RemoteAddr())
	default:
	}
	// Twin: a host peer comes through.
	go func() {
		c := <-accepted
		fmt.Fprintln(c, "ok")
		c.Close()
	}()
	if _, out := dial(t, sock, nil); out != "ok" {
		t.Fatalf("a host peer through the listener: %q", out)
	}
}
