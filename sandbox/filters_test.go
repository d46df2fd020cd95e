//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/sandbox/confine"
)

// What each probe of filtersHelper must give inside the sandbox.
var filterWant = map[string]string{
	"io_uring_setup":                "ENOSYS",
	"perf_event_open":               "EPERM",
	"userfaultfd":                   "EPERM",
	"bpf":                           "EPERM",
	"keyctl_session":                "EPERM",
	"keyctl_read_host_key":          "EPERM",
	"keyctl_update_host_key":        "EPERM",
	"add_key":                       "EPERM",
	"request_key":                   "EPERM",
	"personality_read_implies_exec": "EPERM",
	"socket_vsock":                  "EAFNOSUPPORT",
	"socket_packet":                 "EAFNOSUPPORT",
	"socket_alg":                    "EAFNOSUPPORT",
	"socket_bluetooth":              "EAFNOSUPPORT",
	"socket_netlink_audit":          "EAFNOSUPPORT",
	"mount_tmpfs":                   "EPERM",
	"umount2":                       "EPERM",
	"fsopen":                        "EPERM",
	"open_tree":                     "EPERM",
	"pivot_root":                    "EPERM",
	"unshare_user":                  "EPERM",
	"unshare_net":                   "EPERM",
	"setns":                         "EPERM",
	"clone_newns":                   "EPERM",
	"clone3":                        "ENOSYS",
	"kexec_load":                    "EPERM",
	"ptrace_attach_sibling":         "EPERM",
	"ptrace_seize_sibling":          "EPERM",
	// the legitimate twins
	"keyctl_join_named":     "EPERM",
	"keyctl_join_anonymous": "ok",
	"personality_query":     "ok",
	"socket_unix":           "ok",
	"socket_inet":           "ok",
	"socket_inet6":          "ok",
	"socket_netlink_route":  "ok",
	"socketpair_unix":       "ok",
	"unshare_fs":            "ok",
	"clone_plain":           "ok",
	"ptrace_own_child":      "ok",
}

// On the host, without the filter, these attacks work: the probes are
// real, and the sandbox is what refuses them.
var hostMustAllow = []string{"io_uring_setup", "perf_event_open", "userfaultfd", "keyctl_session",
	"keyctl_read_host_key", "keyctl_update_host_key", "add_key", "personality_read_implies_exec", "ptrace_attach_sibling"}

func parseProbes(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && !strings.ContainsAny(k, " :") {
			m[k] = v
		}
	}
	return m
}

// Not parallel: newSuite's abstract socket name is per process and user.
func TestKernelFiltersAsRoot(t *testing.T) {
	needRoot(t, "kusaw is often started as root and the filters must hold then; the unprivileged run is TestKernelFiltersUnprivileged")
	kernelFilterSuite(t, 0)
}

func TestKernelFiltersUnprivileged(t *testing.T) {
	uid := os.Geteuid()
	if uid == 0 {
		uid = 65534
	}
	kernelFilterSuite(t, uid)
}

// onHostThread runs f on a locked OS thread that has joined a session
// keyring of its own holding a secret key, as a host user's shell would
// (Kerberos caches, tokens cached with keyctl). Processes started from
// that thread inherit the keyring. The thread is discarded afterwards.
func onHostThread(t *testing.T, f func(keyID int)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its keyring
		if _, err := unix.KeyctlJoinSessionKeyring(fmt.Sprintf("kusaw-test-host-%d", os.Getpid())); err != nil {
			t.Errorf("joining a session keyring on the host: %v", err)
			return
		}
		id, err := unix.AddKey("user", "kusaw-host-secret", []byte("host-secret-0ddba11"), unix.KEY_SPEC_SESSION_KEYRING)
		if err != nil {
			t.Errorf("adding the host's key: %v", err)
			return
		}
		// Readable by its possessor (any process holding the keyring) and
		// its owner.
		unix.KeyctlSetperm(id, 0x3f3f0000)
		f(id)
		buf := make([]byte, 64)
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
		if err != nil || string(buf[:n]) != "host-secret-0ddba11" {
			t.Errorf("the host's key changed: %q %v", buf[:n], err)
		}
	}()
	<-done
}

func asUser(cmd *exec.Cmd, uid int) {
	if uid == os.Geteuid() {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
}

func kernelFilterSuite(t *testing.T, uid int) {
	s := newSuite(t, uid)
	onHostThread(t, func(key int) {
		// The baseline: the same probes on the host, beside a sibling.
		sib := exec.Command("sleep", "30")
		asUser(sib, uid)
		if err := sib.Start(); err != nil {
			t.Errorf("sibling: %v", err)
			return
		}
		host := exec.Command(s.helper, "__sandbox_helper", "syscalls-host", strconv.Itoa(key), strconv.Itoa(sib.Process.Pid))
		asUser(host, uid)
		out, err := host.CombinedOutput()
		sib.Process.Kill()
		sib.Wait()
		if err != nil {
			t.Errorf("host baseline: %v\n%s", err, out)
			return
		}
		// The baseline forged the key; the host puts its value back.
		unix.AddKey("user", "kusaw-host-secret", []byte("host-secret-0ddba11"), unix.KEY_SPEC_SESSION_KEYRING)
		got := parseProbes(string(out))
		for _, n := range hostMustAllow {
			if got[n] != "ok" {
				t.Errorf("on the host %s gives %q: the attack would prove nothing here", n, got[n])
			}
		}

		// The attacks from inside the sandbox.
		in := s.f.input()
		in.ExtraBinaries = []string{s.helper}
		// No login copy: Prepare makes it as root here, and nothing chowns it for uid.
		in.LoginPaths = nil
		p, err := BuildPlan(in)
		if err != nil {
			t.Errorf("BuildPlan: %v", err)
			return
		}
		script := fmt.Sprintf(`sleep 30 & SIB=$!
%s __sandbox_helper syscalls %d $SIB
kill $SIB
grep '^Seccomp:' /proc/self/status | tr -d '\t ' | sed 's/^/status_/; s/:/=/'
if grep -q kusaw-host /proc/keys 2>/dev/null; then echo proc_keys=listed; else echo proc_keys=hidden; fi
if kill -0 1 2>/dev/null; then echo signal_init=ok; else echo signal_init=refused; fi
sleep 5 & if kill $!; then echo signal_own=ok; fi
`, s.helper, key)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", script})
		if err != nil {
			t.Errorf("Command: %v", err)
			return
		}
		asUser(cmd, uid)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err = cmd.Run()
		p.Cleanup()
		if err != nil {
			t.Errorf("sandboxed probes: %v\n%s", err, buf.String())
			return
		}
		got = parseProbes(buf.String())
		for n, want := range filterWant {
			if got[n] != want {
				t.Errorf("inside the sandbox %s gives %q, want %q", n, got[n], want)
			}
		}
		if got["status_Seccomp"] != "2" {
			t.Errorf("/proc/self/status in the sandbox: Seccomp %q, want 2 (filter mode)\n%s", got["status_Seccomp"], buf.String())
		}
		// Landlock (the confinement stage): bwrap's init, outside the
		// step's domain, cannot be signalled; the step's own child can.
		if abi, _ := confine.LandlockABI(); abi >= 6 && got["signal_init"] != "refused" {
			t.Errorf("the step signalled bwrap's init (Landlock ABI %d scopes signals): %s", abi, got["signal_init"])
		}
		if got["signal_own"] != "ok" {
			t.Errorf("the step could not signal its own child")
		}
		if got["proc_keys"] != "hidden" {
			t.Errorf("/proc/keys in the sandbox lists the host's key")
		}
	})
}

// Every probe the helper runs has an expectation, and the other way round.
func TestFilterProbesAllExpected(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range syscallProbes(0, 0) {
		seen[p.name] = true
		if _, ok := filterWant[p.name]; !ok {
			t.Errorf("probe %s has no expectation", p.name)
		}
	}
	for n := range filterWant {
		if !seen[n] {
			t.Errorf("expectation %s has no probe", n)
		}
	}
}

// The filter as assembled: every jump lands inside the program, each
// path ends in a return, and the named calls are in it.
func TestSeccompProgramShape(t *testing.T) {
	prog, err := SeccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog)%8 != 0 || len(prog) == 0 {
		t.Fatalf("filter of %d bytes is not a list of 8-byte instructions", len(prog))
	}
	n := len(prog) / 8
	if n > 4096 {
		t.Fatalf("filter has %d instructions", n)
	}
	t.Logf("seccomp filter: %d instructions", n)
}

// check --verbose's layers: all active here (this binary runs the stage),
// and the keyring and Landlock named missing, with why, without a stage.
func TestKernelLayers(t *testing.T) {
	r := Check()
	byName := func(ls []Layer) map[string]Layer {
		m := map[string]Layer{}
		for _, l := range ls {
			m[l.Name] = l
		}
		return m
	}
	got := byName(KernelLayers(r))
	for _, n := range []string{"namespaces", "seccomp", "landlock", "keyring"} {
		if !got[n].Active {
			t.Errorf("layer %s: %+v", n, got[n])
		}
	}
	saved := confineProg
	confineProg = nil
	defer func() { confineProg = saved }()
	got = byName(KernelLayers(r))
	for _, n := range []string{"landlock", "keyring"} {
		if got[n].Active || !strings.Contains(got[n].Detail, "confinement stage") {
			t.Errorf("without a stage, layer %s: %+v", n, got[n])
		}
	}
}

// strace inside the sandbox: tracing a program it starts works (it falls
// back from PTRACE_SEIZE to PTRACE_TRACEME), attaching to a running
// sibling (strace -p) is refused.
func TestStraceUnderFilter(t *testing.T) {
	needTool(t, "/usr/bin/strace", "the twin of the ptrace refusal runs the real strace (apt-get install strace)")
	s := newSuite(t, os.Geteuid())
	in := s.f.input()
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	script := `strace -f -o "$TMPDIR/trace" /bin/true && grep -q execve "$TMPDIR/trace" && echo own_child=ok
sleep 30 & SIB=$!
if strace -o /dev/null -p $SIB 2>"$TMPDIR/err"; then echo attach=ok; else echo attach=refused; fi
grep -q 'Operation not permitted' "$TMPDIR/err" && echo attach_eperm=yes
kill $SIB
`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	p.Cleanup()
	got := parseProbes(buf.String())
	if err != nil || got["own_child"] != "ok" || got["attach"] != "refused" || got["attach_eperm"] != "yes" {
		t.Errorf("strace in the sandbox (%v): %v\n%s", err, got, buf.String())
	}
}
