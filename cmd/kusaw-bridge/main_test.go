//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/internal/bridgebuild"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// The test binary is kusaw-bridge (TestMain runs main for the stage's and
// the bridge's arguments) and also the step (__probe), so the stage sees
// its command is its own bridge exactly as installed.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == confine.Subcommand || os.Args[1] == "--lease") {
		main()
	}
	if len(os.Args) > 1 && os.Args[1] == "__probe" {
		probe(os.Args[2:])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probe is the step: it reports what it could do, one name=result a line.
func probe(a []string) {
	outside, inside, hostPID, addr := a[0], a[1], a[2], a[3]
	res := func(err error) string {
		if err != nil {
			return "refused"
		}
		return "ok"
	}
	fmt.Printf("write_outside=%s\n", res(os.WriteFile(filepath.Join(outside, "f"), []byte("x"), 0o644)))
	fmt.Printf("write_inside=%s\n", res(os.WriteFile(filepath.Join(inside, "f"), []byte("x"), 0o644)))
	pid, _ := strconv.Atoi(hostPID)
	fmt.Printf("signal_host=%s\n", res(unix.Kill(pid, 0)))
	id, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	fmt.Printf("keyring=%d %v\n", id, err)
	if len(a) > 4 {
		c, err := net.DialTimeout("unix", "@"+a[4], 5*time.Second)
		if err == nil {
			c.Close()
		}
		fmt.Printf("abstract_host=%s\n", res(err))
	}
	if addr != "" {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			b := make([]byte, 2)
			_, err = c.Read(b)
			c.Close()
		}
		fmt.Printf("proxy=%s\n", res(err))
	}
}

func parse(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// fakeLease is the proxy's end of the hand-over: it takes the listener,
// answers ok, and greets whatever connects to it.
func fakeLease(t testing.TB) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "lease.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			uc := c.(*net.UnixConn)
			buf, oob := make([]byte, 512), make([]byte, 512)
			_, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
			if err != nil {
				c.Close()
				continue
			}
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			var fds []int
			for _, m := range msgs {
				f, _ := unix.ParseUnixRights(&m)
				fds = append(fds, f...)
			}
			if len(fds) == 0 {
				fmt.Fprint(c, "error: no listener\n")
				c.Close()
				continue
			}
			ln, err := net.FileListener(os.NewFile(uintptr(fds[0]), "handed-over"))
			if err != nil {
				fmt.Fprintf(c, "error: %v\n", err)
				c.Close()
				continue
			}
			fmt.Fprint(c, "ok\n")
			c.Close()
			go func() {
				defer ln.Close()
				for {
					pc, err := ln.Accept()
					if err != nil {
						return
					}
					pc.Write([]byte("hi"))
					pc.Close()
				}
			}()
		}
	}()
	return sock
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// An allowlist step's start is one program: the stage runs the bridge
// itself and confines after the hand-over. The attack: the step writes
// beside the writable folder (the host's file system lets it: only
// Landlock refuses), signals a process outside the sandbox's domain and
// reads the host's session keyring. The twin: it writes in its writable
// folder and reaches the proxy through the handed-over listener. The same
// for a stage whose command is not the bridge (network none or open).
func TestStageConfinesWithAndWithoutBridge(t *testing.T) {
	abi := needLandlock(t, "the stage's write rules cannot be tested")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hostRing, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	if err != nil {
		t.Fatalf("the host's session keyring: %v", err)
	}
	for _, bridged := range []bool{true, false} {
		t.Run(map[bool]string{true: "bridge", false: "stage"}[bridged], func(t *testing.T) {
			outside, inside := t.TempDir(), t.TempDir()
			addr := ""
			argv := append([]string{exe, confine.Subcommand}, confine.Args([]string{inside})...)
			if bridged {
				addr = freePort(t)
				argv = append(argv, exe, "--lease", fakeLease(t), "--listen", addr, "--")
			}
			argv = append(argv, exe, "__probe", outside, inside, strconv.Itoa(os.Getpid()), addr)
			cmd := exec.Command(argv[0], argv[1:]...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			if err != nil {
				t.Fatalf("the step did not run: %v\n%s", err, out)
			}
			got := parse(string(out))
			want := map[string]string{"write_outside": "refused", "write_inside": "ok"}
			if abi >= 6 {
				want["signal_host"] = "refused"
			}
			if bridged {
				want["proxy"] = "ok"
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %q, want %q\n%s", k, got[k], v, out)
				}
			}
			if ring := strings.Fields(got["keyring"]); len(ring) == 0 || ring[0] == strconv.Itoa(hostRing) || ring[0] == "0" {
				t.Errorf("the step's session keyring is %q, the host's %d: want a fresh one\n%s", got["keyring"], hostRing, out)
			}
		})
	}
}

// A hook's failure stops the step: nothing runs unconfined.
func TestStageFailureStopsStep(t *testing.T) {
	exe, _ := os.Executable()
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command(exe, confine.Subcommand, "-w")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != confine.ExitSetup || !strings.Contains(string(out), "-w needs a path") {
		t.Fatalf("a broken stage: %v %s, want exit %d naming -w", err, out, confine.ExitSetup)
	}
	// The bridge refusing the hand-over (no lease there): exit 125, no step.
	cmd = exec.Command(exe, confine.Subcommand, "--", exe, "--lease", filepath.Join(t.TempDir(), "none.sock"), "--listen", freePort(t), "--", "/bin/sh", "-c", "touch "+marker)
	out, err = cmd.CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Fatalf("a failed hand-over: %v %s, want exit 125", err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the step ran after the hand-over failed")
	}
}

// needLandlock is the kernel's Landlock ABI; without Landlock the test is
// skipped, and fails under CI=true, saying what it cannot test.
func needLandlock(t *testing.T, cannot string) int {
	t.Helper()
	abi, why := confine.LandlockABI()
	if abi < 1 {
		skipOrFail(t, fmt.Sprintf("Landlock is not available here (%v): %s", why, cannot))
	}
	return abi
}

// skipOrFail skips the test with msg, or fails it under CI=true, where
// every test must run.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// needStaticCC skips the test, or fails it under CI=true, where no C
// compiler with a static C library can build the C stage.
func needStaticCC(t *testing.T, cannot string) {
	t.Helper()
	if !bridgebuild.StaticCC() {
		skipOrFail(t, "no C compiler with a static C library here (apt-get install gcc libc6-dev; make deps does): "+cannot)
	}
}
