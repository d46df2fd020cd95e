//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/internal/bridgebuild"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// withoutFaccessat2 is the test binary as "__no_faccessat2 PROG ARG...":
// it execs PROG under a seccomp filter that answers faccessat2 with
// ENOSYS, as a kernel before 5.8 (or a container's filter) does.
func init() {
	if len(os.Args) < 3 || os.Args[1] != "__no_faccessat2" {
		return
	}
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_FACCESSAT2, SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	})
	if err != nil {
		panic(err)
	}
	f := make([]unix.SockFilter, len(prog))
	for i, p := range prog {
		f[i] = unix.SockFilter{Code: p.Op, Jt: p.Jt, Jf: p.Jf, K: p.K}
	}
	fp := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fp))); e != 0 {
		fmt.Fprintln(os.Stderr, "seccomp:", e)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, syscall.Exec(os.Args[2], os.Args[2:], os.Environ()))
	os.Exit(2)
}

// The attack: a kernel without faccessat2, where the C stage at the entry
// point cannot tell whether the command may be executed (no C library's
// emulation yet) and returns to _start after it gave the step a keyring
// and Landlock. The step must still run confined (the constructor does the
// stage again and decides), never unconfined, and a command not found or
// not a program must fail as with faccessat2. The twin: the same bridge
// without the filter.
func TestCStageWithoutFaccessat2(t *testing.T) {
	needLandlock(t, "the step's confinement cannot be checked")
	needStaticCC(t, "the C stage cannot be built")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hostRing, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	if err != nil {
		t.Fatalf("the host's session keyring: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kusaw-bridge")
	if err := bridgebuild.Build("", bin, true); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(dir, "bin")
	os.Mkdir(binDir, 0o755)
	os.Symlink(exe, filepath.Join(binDir, "kusaw-probe"))
	os.WriteFile(filepath.Join(binDir, "not-a-program"), []byte("neither ELF nor #!"), 0o755)
	outside, inside := t.TempDir(), t.TempDir()
	run := func(filtered bool, argv ...string) (string, int) {
		args := append(append([]string{bin, confine.Subcommand}, confine.Args([]string{inside})...), argv...)
		if filtered {
			args = append([]string{exe, "__no_faccessat2"}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "PATH="+binDir+":/usr/bin:/bin")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(out), outside, "OUTSIDE"), cmd.ProcessState.ExitCode()
	}
	for _, filtered := range []bool{false, true} {
		out, code := run(filtered, "kusaw-probe", "__probe", outside, inside, strconv.Itoa(os.Getpid()), "")
		got := parse(out)
		if code != 0 || got["write_outside"] != "refused" || got["write_inside"] != "ok" {
			t.Errorf("without faccessat2 %v: exit %d, want the step run with writes only beneath %s\n%s", filtered, code, inside, out)
		}
		if ring := strings.Fields(got["keyring"]); len(ring) == 0 || ring[0] == strconv.Itoa(hostRing) || ring[0] == "0" {
			t.Errorf("without faccessat2 %v: the step's session keyring is %q, the host's %d: want a fresh one\n%s", filtered, got["keyring"], hostRing, out)
		}
	}
	for _, c := range []struct {
		argv []string
		code int
	}{
		{[]string{"no-such-program-here"}, confine.ExitNotFound},
		{[]string{filepath.Join(outside, "no-such-file")}, confine.ExitNotFound},
		{[]string{"not-a-program"}, confine.ExitNoExec},
	} {
		want, wantCode := run(false, c.argv...)
		got, code := run(true, c.argv...)
		if code != c.code || wantCode != c.code || got != want {
			t.Errorf("%v without faccessat2: exit %d %q; with it: exit %d %q; want exit %d and the same message", c.argv, code, got, wantCode, want, c.code)
		}
	}
}
