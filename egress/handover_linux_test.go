package egress

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func fdOf(t *testing.T, c interface {
	SyscallConn() (syscall.RawConn, error)
}) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// The hand-over socket accepts only a listening TCP socket bound to the
// lease's address, and only once.
func TestHandOver(t *testing.T) {
	up := tlsUpstream(t, http.HandlerFunc(hello))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{SocketDir: t.TempDir(), Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	sock := e.l.SocketPath()
	if e.l.HandedOver() {
		t.Fatal("handed over before any bridge")
	}

	// Attack: a connected socket instead of a listener.
	other, _ := net.Listen("tcp", "127.0.0.1:0")
	defer other.Close()
	cc, err := net.Dial("tcp", other.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := HandOver(sock, fdOf(t, cc.(*net.TCPConn))); err == nil || !strings.Contains(err.Error(), "not listening") {
		t.Fatalf("connected socket: %v", err)
	}
	// Attack: a UDP socket.
	uc, _ := net.ListenPacket("udp", "127.0.0.1:0")
	defer uc.Close()
	if err := HandOver(sock, fdOf(t, uc.(*net.UDPConn))); err == nil || !strings.Contains(err.Error(), "not a stream socket") {
		t.Fatalf("udp socket: %v", err)
	}
	// Attack: a listener on another address.
	if err := HandOver(sock, fdOf(t, other.(*net.TCPListener))); err == nil || !strings.Contains(err.Error(), "not bound to "+e.l.ListenAddr()) {
		t.Fatalf("wrong listener: %v", err)
	}
	if e.l.HandedOver() {
		t.Fatal("a refused hand-over counted")
	}
	e.rec.wait(t, "hand-over failure", func(d Decision) bool { return d.Kind == KindHandOver && d.Decision == Fail })

	// Twin: the right listener is taken and served.
	ln, err := net.Listen("tcp", e.l.ListenAddr())
	if err != nil {
		t.Skipf("the lease's port is taken on the host's loopback: %v", err)
	}
	if err := HandOver(sock, fdOf(t, ln.(*net.TCPListener))); err != nil {
		t.Fatal(err)
	}
	ln.Close() // the proxy holds its own copy
	select {
	case <-e.l.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not ready after the hand-over")
	}
	resp, err := e.client().Get("https://allowed.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// Nothing can hand over a second listener: the socket is gone.
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("hand-over socket still there: %v", err)
	}
	if err := HandOver(sock, fdOf(t, other.(*net.TCPListener))); err == nil {
		t.Fatal("a second hand-over was accepted")
	}
}

func TestLeaseSocketPathTooLong(t *testing.T) {
	p, _ := NewProxy(Options{})
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	os.MkdirAll(dir, 0o700)
	_, err := p.Lease(LeaseConfig{ID: "x", SocketDir: dir})
	if err == nil || !strings.Contains(err.Error(), "longer than 107 bytes") {
		t.Fatalf("%v", err)
	}
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildDir  string
)

// kusawBinary builds cmd/kusaw once per test run.
func kusawBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "kusaw-egress-test-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "kusaw")
		out, err := exec.Command("go", "build", "-o", buildBin, "../cmd/kusaw").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// needBwrap returns the bwrap path, or skips (fails under CI).
func needBwrap(t testing.TB) string {
	t.Helper()
	const bw = "/usr/bin/bwrap"
	if _, err := os.Stat(bw); err != nil {
		skipOrFail(t, "bubblewrap is not installed at %s", bw)
	}
	if out, err := exec.Command(bw, "--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true").CombinedOutput(); err != nil {
		skipOrFail(t, "bwrap cannot make namespaces here: %v %s", err, out)
	}
	return bw
}

func needCurl(t testing.TB) string {
	t.Helper()
	const c = "/usr/bin/curl"
	if _, err := os.Stat(c); err != nil {
		skipOrFail(t, "curl is not installed at %s", c)
	}
	return c
}

// sandboxed runs argv under bwrap with a private network namespace,
// through the bridge of lease l.
func sandboxed(t testing.TB, l *Lease, argv ...string) *exec.Cmd {
	bw := needBwrap(t)
	args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"}
	// The socket directory is visible read-only: connecting needs no write.
	dir := filepath.Dir(l.SocketPath())
	args = append(args, "--ro-bind", dir, dir)
	args = append(args, "--")
	args = append(args, l.BridgeArgv(kusawBinary(t))...)
	args = append(args, argv...)
	cmd := exec.Command(bw, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, l.Env()...)
	return cmd
}

// The full path: curl inside bwrap's private network namespace reaches an
// allowed host through the bridge and the proxy, is refused for another,
// and cannot reach the same upstream directly.
func TestBridgeInBubblewrap(t *testing.T) {
	curl := needCurl(t)
	up := tlsUpstream(t, http.HandlerFunc(hello))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{SocketDir: t.TempDir(), Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	e.dns.set("evil.test", "127.0.0.1")
	caFile := filepath.Join(filepath.Dir(e.l.SocketPath()), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: getCA(t).cert.Certificate[0]}), 0o644)

	script := fmt.Sprintf(`%[1]s -sS --max-time 10 --cacert %[2]s https://allowed.test:%[3]s/ok; echo " allowed=$?"
%[1]s -sS --max-time 10 --cacert %[2]s https://evil.test:%[3]s/ 2>&1; echo " evil=$?"
%[1]s -sS --max-time 5 --noproxy '*' --cacert %[2]s https://127.0.0.1:%[3]s/ 2>&1; echo " direct=$?"
echo "sockets=$(ls -l /proc/$$/fd | grep -c socket:)"`, curl, caFile, port)
	cmd := sandboxed(t, e.l, "/bin/sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sandbox: %v\n%s", err, out)
	}
	o := string(out)
	if !strings.Contains(o, "hello from allowed.test:"+port+" allowed=0") {
		t.Fatalf("allowed host not reached through the proxy:\n%s", o)
	}
	if !strings.Contains(o, "403") || !strings.Contains(o, "evil=56") {
		t.Fatalf("evil host not refused with 403:\n%s", o)
	}
	if !strings.Contains(o, "direct=7") {
		t.Fatalf("direct connection did not fail to connect:\n%s", o)
	}
	// The bridge's listener and hand-over socket are close-on-exec: the
	// step holds no socket of the proxy's.
	if !strings.Contains(o, "sockets=0") {
		t.Fatalf("the step inherited sockets:\n%s", o)
	}
	if !e.l.HandedOver() {
		t.Fatal("no hand-over recorded")
	}
	e.rec.wait(t, "evil refused", func(d Decision) bool { return d.Host == "evil.test" && d.Reason == ReasonNotAllowed })
	if up.accepts.Load() != 1 {
		t.Fatalf("upstream accepts %d, want 1 (the allowed request only)", up.accepts.Load())
	}
	if _, err := os.Stat(e.l.SocketPath()); !os.IsNotExist(err) {
		t.Fatal("the hand-over socket outlived the hand-over")
	}
}

// If the hand-over fails the step never starts and the bridge says why.
func TestBridgeFailureStopsTheStep(t *testing.T) {
	e := newEnv(t, Options{}, LeaseConfig{SocketDir: t.TempDir()})
	marker := filepath.Join(filepath.Dir(e.l.SocketPath()), "ran")
	bw := needBwrap(t)
	dir := filepath.Dir(e.l.SocketPath())
	cases := [][]string{
		{"--lease", filepath.Join(dir, "missing.sock"), "--listen", e.l.ListenAddr()},
		{"--lease", e.l.SocketPath(), "--listen", "127.0.0.1:1"}, // the proxy refuses another address
		{"--lease", e.l.SocketPath(), "--listen", "10.0.0.1:80"},
		{"--lease", e.l.SocketPath()},
	}
	for _, c := range cases {
		args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", dir, dir, "--", kusawBinary(t), "__egress-bridge"}
		args = append(args, c...)
		args = append(args, "--", "/usr/bin/touch", marker)
		var stderr bytes.Buffer
		cmd := exec.Command(bw, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != BridgeExitHandOver {
			t.Fatalf("%v: %v %s", c, err, stderr.String())
		}
		msg := strings.TrimSpace(stderr.String())
		if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "kusaw: egress bridge: ") {
			t.Fatalf("%v: stderr %q", c, msg)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%v: the step ran", c)
		}
	}
	if e.l.HandedOver() {
		t.Fatal("handed over")
	}
	// A command that does not exist: the hand-over works, exec fails with 127.
	cmd := sandboxed(t, e.l, "/no/such/command")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != BridgeExitNotFound {
		t.Fatalf("%v %s", err, stderr.String())
	}
	io.Discard.Write(nil)
}

// Local-service listeners come with the proxy's: each must listen on
// loopback on a leased port. A listener on a port no local-service entry
// lists is refused (attack), a leased one is taken (twin).
func TestHandOverLocalListeners(t *testing.T) {
	leased, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer leased.Close()
	lp := strconv.Itoa(portOf(t, leased.Addr().String()))
	// The lease's port is free in the sandbox's own namespace, not always
	// on the host's loopback, where this test binds it: another lease.
	var e *env
	var proxyLn net.Listener
	for try := 1; ; try++ {
		e = newEnv(t, Options{}, LeaseConfig{SocketDir: t.TempDir(), Allow: rules(t, "localhost:"+lp)})
		if proxyLn, err = net.Listen("tcp", e.l.ListenAddr()); err == nil {
			break
		}
		if try == 5 {
			t.Fatalf("five leases' ports were taken on the host's loopback: %v", err)
		}
	}
	defer proxyLn.Close()
	if got := e.l.LeasedLocalPorts(); len(got) != 1 || strconv.Itoa(got[0]) != lp {
		t.Fatalf("leased ports %v, want [%s]", got, lp)
	}
	argv := strings.Join(e.l.BridgeArgv("kusaw"), " ")
	if !strings.Contains(argv, "--local "+lp+" --") {
		t.Fatalf("bridge argv %q lacks --local %s", argv, lp)
	}
	pfd := fdOf(t, proxyLn.(*net.TCPListener))

	unlisted, _ := net.Listen("tcp", "127.0.0.1:0")
	defer unlisted.Close()
	if err := HandOver(e.l.SocketPath(), pfd, fdOf(t, unlisted.(*net.TCPListener))); err == nil || !strings.Contains(err.Error(), "which no local-service entry lists") {
		t.Fatalf("unlisted local listener: %v", err)
	}
	uc, _ := net.ListenPacket("udp", "127.0.0.1:"+lp)
	if uc != nil {
		defer uc.Close()
		if err := HandOver(e.l.SocketPath(), pfd, fdOf(t, uc.(*net.UDPConn))); err == nil || !strings.Contains(err.Error(), "not a stream socket") {
			t.Fatalf("udp local socket: %v", err)
		}
	}
	if e.l.HandedOver() {
		t.Fatal("a refused hand-over counted")
	}
	if err := HandOver(e.l.SocketPath(), pfd, fdOf(t, leased.(*net.TCPListener))); err != nil {
		t.Fatalf("leased local listener: %v", err)
	}
	if !e.l.HandedOver() {
		t.Fatal("not handed over")
	}
}
