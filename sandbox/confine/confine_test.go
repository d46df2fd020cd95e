//go:build linux

package confine

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The stage is tested from the step's side, outside bwrap (no seccomp, the
// host's writable file system): what the stage alone refuses.

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		err := Run(os.Args[2:])
		code := ExitSetup
		var ce *Error
		if errors.As(err, &ce) {
			code = ce.Code
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(code)
	}
	if len(os.Args) > 2 && os.Args[1] == "__probe" {
		os.Exit(probe(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// probe is the step: one operation, exit 0 when it worked, 1 when refused.
func probe(a []string) int {
	var err error
	switch a[0] {
	case "write":
		err = os.WriteFile(a[1], []byte("x"), 0o644)
	case "connect":
		var c net.Conn
		if c, err = net.Dial("unix", a[1]); err == nil {
			c.Close()
		}
	case "selfabstract":
		var l net.Listener
		if l, err = net.Listen("unix", a[1]); err == nil {
			go func() {
				if c, err := l.Accept(); err == nil {
					c.Close()
				}
			}()
			var c net.Conn
			if c, err = net.Dial("unix", a[1]); err == nil {
				c.Close()
			}
			l.Close()
		}
	case "kill":
		pid, _ := strconv.Atoi(a[1])
		err = unix.Kill(pid, 0)
	case "keyread":
		id, _ := strconv.Atoi(a[1])
		_, err = unix.KeyctlBuffer(unix.KEYCTL_READ, id, make([]byte, 64), 0)
	case "keyring":
		var id int
		id, err = unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
		fmt.Println(id)
	default:
		err = errors.New("unknown probe")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, a[0], err)
		return 1
	}
	return 0
}

func needLandlock(t *testing.T, min int) int {
	t.Helper()
	abi, err := LandlockABI()
	if abi < min {
		msg := fmt.Sprintf("Landlock ABI %d here (%v), the test needs %d", abi, err, min)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return abi
}

// step runs the probe as the step: through the stage (confined) or not.
func step(t *testing.T, confined bool, writable []string, probeArgs ...string) (int, string) {
	t.Helper()
	exe, _ := os.Executable()
	argv := append([]string{"__probe"}, probeArgs...)
	if confined {
		argv = append(append([]string{Subcommand}, Args(writable)...), append([]string{exe}, argv...)...)
	}
	out, err := exec.Command(exe, argv...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

func TestLandlockWritesOnlyBeneathWritable(t *testing.T) {
	needLandlock(t, 1)
	ok, other := t.TempDir(), t.TempDir()
	// attack: a folder the file system lets us write, outside the plan's list
	if code, _ := step(t, false, nil, "write", filepath.Join(other, "f")); code != 0 {
		t.Fatal("the host refuses the write already: the attack proves nothing")
	}
	if code, out := step(t, true, []string{ok}, "write", filepath.Join(other, "g")); code != 1 || !strings.Contains(out, "permission denied") {
		t.Errorf("a write outside the writable paths was not refused (exit %d): %s", code, out)
	}
	// twins: beneath a writable path, and /dev/null
	if code, out := step(t, true, []string{ok}, "write", filepath.Join(ok, "sub-file")); code != 0 {
		t.Errorf("a write beneath a writable path failed: %s", out)
	}
	if code, out := step(t, true, []string{ok}, "write", "/dev/null"); code != 0 {
		t.Errorf("writing /dev/null failed: %s", out)
	}
}

func TestLandlockScopesSignalsAndAbstractSockets(t *testing.T) {
	needLandlock(t, 6)
	name := fmt.Sprintf("@kusaw-confine-test-%d", os.Getpid())
	l, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	me := strconv.Itoa(os.Getpid())
	for _, c := range [][]string{{"connect", name}, {"kill", me}} {
		if code, out := step(t, false, nil, c...); code != 0 {
			t.Fatalf("%v fails on the host already: %s", c, out)
		}
		if code, out := step(t, true, nil, c...); code != 1 {
			t.Errorf("%v from the confined step was not refused: %s", c, out)
		}
	}
	// twin: the step's own abstract socket
	if code, out := step(t, true, nil, "selfabstract", name+"-own"); code != 0 {
		t.Errorf("the step's own abstract socket failed: %s", out)
	}
}

// A key in the host's session keyring, readable by whoever possesses the
// keyring: an unconfined child inherits it and reads the key; the
// confined step has a keyring of its own and cannot.
func TestFreshSessionKeyring(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread leaves with its keyring
		host, err := unix.KeyctlJoinSessionKeyring(fmt.Sprintf("kusaw-confine-test-%d", os.Getpid()))
		if err != nil {
			t.Errorf("join: %v", err)
			return
		}
		id, err := unix.AddKey("user", "kusaw-host-secret", []byte("s3cret"), unix.KEY_SPEC_SESSION_KEYRING)
		if err != nil {
			t.Errorf("add_key: %v", err)
			return
		}
		unix.KeyctlSetperm(id, 0x3f000000) // possessor only
		if code, out := step(t, false, nil, "keyread", strconv.Itoa(id)); code != 0 {
			t.Errorf("an unconfined child cannot read the key: the attack proves nothing: %s", out)
		}
		if code, out := step(t, true, nil, "keyread", strconv.Itoa(id)); code != 1 {
			t.Errorf("the confined step read the host's key: %s", out)
		}
		code, out := step(t, true, nil, "keyring")
		if code != 0 || strings.TrimSpace(out) == strconv.Itoa(host) || strings.TrimSpace(out) == "" {
			t.Errorf("the confined step's session keyring is %q, the host's %d", out, host)
		}
	}()
	<-done
}

func TestParse(t *testing.T) {
	s, err := Parse([]string{"-w", "/a", "-w", "/b c", "--", "sh", "-c", "x"})
	if err != nil || len(s.Writable) != 2 || s.Writable[1] != "/b c" || len(s.Argv) != 3 {
		t.Errorf("Parse: %+v %v", s, err)
	}
	for _, bad := range [][]string{{"-w"}, {"--"}, {"-x", "--", "sh"}, {"sh"}} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
