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

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/internal/bridgebuild"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// The stage in C (cgo, run before the Go runtime) and the stage in Go
// (CGO_ENABLED=0) are held to one behaviour: kusaw-bridge built both ways,
// each against the same attacks from the step's side (a write beside the
// writable folder, the host's session keyring, a signal to and an abstract
// socket of a process outside the sandbox's domain) and the same
// legitimate twins (a write beneath the writable folder, a command found
// on PATH), and the same failures (exit 127 for a command not found, 126
// for one that cannot be run, 125 for a bad argument), with the same
// messages.
func TestStageImplementationsAgree(t *testing.T) {
	abi := needLandlock(t, "the stages' write rules cannot be compared")
	needStaticCC(t, "the C stage cannot be built")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hostRing, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	if err != nil {
		t.Fatalf("the host's session keyring: %v", err)
	}
	abstract := fmt.Sprintf("kusaw-stage-test-%d", os.Getpid())
	l, err := net.Listen("unix", "@"+abstract)
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
	dir := t.TempDir()
	// A program on PATH (the twin of "not found"), one that is not a
	// program (exec format error: 126).
	binDir := filepath.Join(dir, "bin")
	os.Mkdir(binDir, 0o755)
	os.Symlink(exe, filepath.Join(binDir, "kusaw-probe"))
	os.WriteFile(filepath.Join(binDir, "not-a-program"), []byte("neither ELF nor #!"), 0o755)

	outputs := map[bool]map[string]string{}
	for _, withC := range []bool{true, false} {
		name := map[bool]string{true: "C", false: "Go"}[withC]
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(dir, name, "kusaw-bridge")
			if err := bridgebuild.Build("", bin, withC); err != nil {
				t.Fatal(err)
			}
			if got := isCStage(t, bin); got != withC {
				t.Fatalf("%s: the C stage built in is %v, want %v", bin, got, withC)
			}
			outside, inside := t.TempDir(), t.TempDir()
			run := func(argv ...string) (string, int) {
				cmd := exec.Command(bin, append(append([]string{confine.Subcommand}, confine.Args([]string{inside})...), argv...)...)
				cmd.Env = append(os.Environ(), "PATH="+binDir+":/usr/bin:/bin")
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if err != nil && !errors.As(err, &ee) {
					t.Fatal(err)
				}
				return string(out), cmd.ProcessState.ExitCode()
			}
			// Found on PATH, not by its path.
			out, code := run("kusaw-probe", "__probe", outside, inside, strconv.Itoa(os.Getpid()), "", abstract)
			if code != 0 {
				t.Fatalf("the step did not run: exit %d\n%s", code, out)
			}
			got := parse(out)
			want := map[string]string{"write_outside": "refused", "write_inside": "ok"}
			if abi >= 6 {
				want["signal_host"], want["abstract_host"] = "refused", "refused"
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %q, want %q\n%s", k, got[k], v, out)
				}
			}
			if ring := strings.Fields(got["keyring"]); len(ring) == 0 || ring[0] == strconv.Itoa(hostRing) || ring[0] == "0" {
				t.Errorf("the step's session keyring is %q, the host's %d: want a fresh one\n%s", got["keyring"], hostRing, out)
			}
			// The outside-the-domain twins: unconfined, this process reaches both.
			if c, err := net.Dial("unix", "@"+abstract); err != nil {
				t.Errorf("the abstract socket's twin: %v", err)
			} else {
				c.Close()
			}
			failures := map[string]string{}
			for _, c := range []struct {
				argv []string
				code int
			}{
				{[]string{"no-such-program-here"}, confine.ExitNotFound},
				{[]string{filepath.Join(outside, "no-such-file")}, confine.ExitNotFound},
				{[]string{"not-a-program"}, confine.ExitNoExec},
			} {
				out, code := run(c.argv...)
				if code != c.code {
					t.Errorf("%v: exit %d, want %d\n%s", c.argv, code, c.code, out)
				}
				failures[filepath.Base(c.argv[0])] = strings.ReplaceAll(out, outside, "OUTSIDE")
			}
			cmd := exec.Command(bin, confine.Subcommand, "-w")
			b, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != confine.ExitSetup {
				t.Errorf("a bad argument: exit %d, want %d\n%s", cmd.ProcessState.ExitCode(), confine.ExitSetup, b)
			}
			failures["-w"] = string(b)
			outputs[withC] = failures
		})
	}
	if c, g := outputs[true], outputs[false]; c != nil && g != nil {
		for k, v := range g {
			if c[k] != v {
				t.Errorf("%s: the C stage says %q, the Go stage %q", k, c[k], v)
			}
		}
	}
}

// isCStage says whether bin runs the stage in C: the Go runtime writes
// GODEBUG=inittrace=1 lines as it starts, and the C stage execs the
// command before Go has run, so none appear.
func isCStage(t *testing.T, bin string) bool {
	t.Helper()
	cmd := exec.Command(bin, confine.Subcommand, "--", "/bin/true")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s __confine -- /bin/true: %v\n%s", bin, err, out)
	}
	return !strings.Contains(string(out), "init ")
}
