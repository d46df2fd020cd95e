//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/internal/bridgebuild"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// syscallProbes are raw system calls a prompt-injected step would try,
// and the legitimate ones beside them. filtersHelper runs them (inside
// the sandbox, or on the host for the baseline) and prints "name=result"
// lines, result "ok" or the errno's name.
func syscallProbes(hostKey, sibling int) []probe {
	fdErr := func(fd int, err error) error {
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	raw := func(nr uintptr, a ...uintptr) error {
		var args [6]uintptr
		copy(args[:], a)
		r, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		if e != 0 {
			return e
		}
		if int(r) > 2 && nr != unix.SYS_PERSONALITY && nr != unix.SYS_KEYCTL {
			unix.Close(int(r))
		}
		return nil
	}
	sock := func(family, typ, proto int) func() error {
		return func() error { return fdErr(unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)) }
	}
	params := make([]byte, 120) // struct io_uring_params
	mapAttr := [5]uint32{unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1, 0}
	return []probe{
		{"io_uring_setup", false, func() error {
			return raw(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])))
		}},
		{"perf_event_open", false, func() error {
			attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK,
				Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
			attr.Size = uint32(unsafe.Sizeof(attr))
			return fdErr(unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC))
		}},
		{"userfaultfd", false, func() error { return raw(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */) }},
		{"bpf", false, func() error {
			return raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&mapAttr[0])), unsafe.Sizeof(mapAttr))
		}},
		{"keyctl_session", false, func() error {
			_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
			return err
		}},
		{"keyctl_read_host_key", false, func() error {
			_, err := unix.KeyctlBuffer(unix.KEYCTL_READ, hostKey, make([]byte, 256), 0)
			return err
		}},
		{"keyctl_update_host_key", false, func() error {
			b := []byte("forged")
			_, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_UPDATE, uintptr(hostKey), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0)
			if e != 0 {
				return e
			}
			return nil
		}},
		{"add_key", false, func() error {
			_, err := unix.AddKey("user", "kusaw-step-key", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
			return err
		}},
		{"request_key", false, func() error {
			_, err := unix.RequestKey("user", "kusaw-host-secret", "", 0)
			return err
		}},
		{"keyctl_join_anonymous", false, func() error { return raw(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0) }},
		{"keyctl_join_named", false, func() error {
			_, err := unix.KeyctlJoinSessionKeyring(fmt.Sprintf("kusaw-test-host-%d", os.Getppid()))
			return err
		}},
		{"personality_read_implies_exec", false, func() error { return raw(unix.SYS_PERSONALITY, 0x0400000) }},
		{"personality_query", false, func() error { return raw(unix.SYS_PERSONALITY, 0xffffffff) }},
		{"socket_vsock", false, sock(unix.AF_VSOCK, unix.SOCK_STREAM, 0)},
		{"socket_packet", false, sock(unix.AF_PACKET, unix.SOCK_DGRAM, 0)},
		{"socket_alg", false, sock(unix.AF_ALG, unix.SOCK_SEQPACKET, 0)},
		{"socket_bluetooth", false, sock(unix.AF_BLUETOOTH, unix.SOCK_STREAM, 0)},
		{"socket_netlink_audit", false, sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)},
		{"socket_unix", false, sock(unix.AF_UNIX, unix.SOCK_STREAM, 0)},
		{"socket_inet", false, sock(unix.AF_INET, unix.SOCK_STREAM, 0)},
		{"socket_inet6", false, sock(unix.AF_INET6, unix.SOCK_DGRAM, 0)},
		{"socket_netlink_route", false, sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)},
		{"socketpair_unix", false, func() error {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
			}
			return err
		}},
		{"mount_tmpfs", true, func() error { return unix.Mount("none", "/proc", "tmpfs", 0, "") }},
		{"umount2", true, func() error { return unix.Unmount("/proc", unix.MNT_DETACH) }},
		{"fsopen", true, func() error { return fdErr(unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)) }},
		{"open_tree", true, func() error {
			return fdErr(unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC))
		}},
		{"pivot_root", true, func() error { return unix.PivotRoot("/", "/") }},
		{"unshare_user", true, func() error { return unix.Unshare(unix.CLONE_NEWUSER) }},
		{"unshare_net", true, func() error { return unix.Unshare(unix.CLONE_NEWNET) }},
		{"unshare_fs", false, func() error { return unix.Unshare(unix.CLONE_FS) }},
		{"setns", true, func() error {
			fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Setns(fd, unix.CLONE_NEWNET)
		}},
		{"clone_newns", true, func() error { return rawFork(unix.CLONE_NEWNS) }},
		{"clone_plain", false, func() error { return rawFork(0) }},
		{"clone3", false, func() error { return raw(unix.SYS_CLONE3, 0, 0) }},
		{"kexec_load", true, func() error { return raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0) }},
		{"ptrace_attach_sibling", false, func() error { return ptraceOnce(unix.PTRACE_ATTACH, sibling) }},
		{"ptrace_seize_sibling", false, func() error { return ptraceOnce(unix.PTRACE_SEIZE, sibling) }},
		{"ptrace_own_child", false, ptraceOwnChild},
	}
}

// probe is one system call; unsafe ones (mounts, namespaces, kexec) are
// never run on the host for the baseline.
type probe struct {
	name   string
	unsafe bool
	call   func() error
}

// rawFork is fork with extra clone flags, outside Go's runtime: the child
// leaves at once.
func rawFork(flags uintptr) error {
	r, _, e := unix.RawSyscall6(unix.SYS_CLONE, flags|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	if r == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	unix.Wait4(int(r), &ws, 0, nil)
	return nil
}

// ptraceOnce attaches to pid and detaches again, from one thread.
func ptraceOnce(req int, pid int) error {
	if pid <= 0 {
		return errors.New("no pid")
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(pid), 0, 0, 0, 0)
		if e != 0 {
			done <- e
			return
		}
		if req == unix.PTRACE_ATTACH {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, 0, nil)
		}
		unix.PtraceDetach(pid)
		done <- nil
	}()
	return <-done
}

// ptraceOwnChild is what a debugger does with the program it starts: the
// child asks to be traced (PTRACE_TRACEME), stops at its exec, and the
// parent lets it run to its end.
func ptraceOwnChild() error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c := exec.Command("/bin/true")
		c.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
		if err := c.Start(); err != nil {
			done <- err
			return
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(c.Process.Pid, &ws, 0, nil); err != nil || !ws.Stopped() {
			done <- fmt.Errorf("the traced child did not stop: %v %v", err, ws)
			return
		}
		regs := unix.PtraceRegs{}
		if err := unix.PtraceGetRegs(c.Process.Pid, &regs); err != nil {
			done <- fmt.Errorf("reading the child's registers: %w", err)
			return
		}
		if err := unix.PtraceDetach(c.Process.Pid); err != nil {
			done <- err
			return
		}
		done <- c.Wait()
	}()
	return <-done
}

// filtersHelper: "syscalls|syscalls-host HOSTKEY SIBLINGPID" prints each
// probe's result (syscalls-host: only those safe to run on the host).
func filtersHelper(args []string) int {
	if len(args) != 3 || (args[0] != "syscalls" && args[0] != "syscalls-host") {
		fmt.Fprintln(os.Stderr, "filters helper: syscalls|syscalls-host HOSTKEY SIBLINGPID")
		return 2
	}
	key, _ := strconv.Atoi(args[1])
	sib, _ := strconv.Atoi(args[2])
	for _, p := range syscallProbes(key, sib) {
		if p.unsafe && args[0] == "syscalls-host" {
			continue
		}
		res := "ok"
		if err := p.call(); err != nil {
			var en syscall.Errno
			if errors.As(err, &en) {
				res = unix.ErrnoName(en)
			} else {
				res = strings.ReplaceAll(err.Error(), " ", "_")
			}
		}
		fmt.Printf("%s=%s\n", p.name, res)
	}
	return 0
}

// confineMain is the stage when this test binary is its program.
func confineMain(args []string) int {
	err := confine.Run(args)
	code := confine.ExitSetup
	var ce *confine.Error
	if errors.As(err, &ce) {
		code = ce.Code
	}
	fmt.Fprintf(os.Stderr, "kusaw: %v\n", err)
	return code
}

// confineTestProgram copies this test binary to a folder every user can
// enter and makes it the confinement stage's program.
func confineTestProgram() func() {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-confine-test-")
	if err != nil {
		panic(err)
	}
	os.Chmod(dir, 0o755)
	// kusaw-bridge as make build makes it where a C compiler is: the
	// escape and filter suites then hold the stage in C to their attacks
	// (cmd/kusaw-bridge's TestStageImplementationsAgree holds it to the Go
	// one, which is what this binary runs without a C compiler).
	// A test that runs this binary again (as another user, elsewhere)
	// takes the parent's build from the environment.
	if stage := os.Getenv("KUSAW_TEST_C_STAGE"); stage != "" {
		os.RemoveAll(dir)
		confineOnce.Do(func() { confineProg = []string{stage, confine.Subcommand} })
		return func() {}
	}
	if bridgebuild.StaticCC() {
		dst := filepath.Join(dir, "kusaw-bridge")
		if err := bridgebuild.Build("", dst, true); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("KUSAW_TEST_C_STAGE", dst)
		confineOnce.Do(func() { confineProg = []string{dst, confine.Subcommand} })
		return func() { os.RemoveAll(dir) }
	}
	dst := filepath.Join(dir, "sandbox.test")
	b, err := os.ReadFile(exe)
	if err == nil {
		err = os.WriteFile(dst, b, 0o755)
	}
	if err != nil {
		panic(err)
	}
	confineOnce.Do(func() { confineProg = []string{dst, confine.Subcommand} })
	return func() { os.RemoveAll(dir) }
}
