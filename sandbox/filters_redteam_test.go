//go:build linux && (amd64 || arm64)

package sandbox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// A tracer skips a call by setting its number to -1 at the entry stop
// (strace's fault injection, debuggers that skip a call), and the kernel
// runs the filter after that stop: -1 is no x32 call, and the filter must
// not kill the step's own traced child for it. The twin on the host gives
// the same output; x32 calls themselves stay killed (TestSeccompKillsX32,
// and the call just below -1 here).
func TestTracerSkippedCallNotKilled(t *testing.T) {
	needTool(t, "/usr/bin/strace", "a tracer's skipped call is injected by the real strace (apt-get install strace)")
	// dash (sh) prints $$ from its getpid at start: the injected result.
	const inject = `strace -f -o /dev/null -e trace=getpid -e inject=getpid:retval=4242 /bin/sh -c 'echo pid=$$'; echo rc=$?`
	host, err := exec.Command("/bin/sh", "-c", inject).CombinedOutput()
	if got := parseProbes(string(host)); err != nil || got["pid"] != "4242" || got["rc"] != "0" {
		t.Fatalf("on the host strace's injection does not work, so the sandbox's answer proves nothing: %v\n%s", err, host)
	}
	uids := []int{os.Geteuid()}
	if os.Geteuid() == 0 {
		uids = append(uids, 65534)
	}
	for _, uid := range uids {
		s := newSuite(t, uid)
		in := s.f.input()
		in.LoginPaths = nil // Prepare makes the login copy as root, and nothing chowns it for uid
		p, err := BuildPlan(in)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", inject})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		asUser(cmd, uid)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err = cmd.Run()
		cancel()
		p.Cleanup()
		if got := parseProbes(buf.String()); err != nil || got["pid"] != "4242" || got["rc"] != "0" {
			t.Errorf("uid %d: strace's injected result in the sandbox (%v): want pid=4242 rc=0 as on the host\n%s", uid, err, buf.String())
		}
	}
	if got := runFilter(t, auditArch, 0xffffffff); got != retENOSYS {
		t.Errorf("system call -1: %#x, want ENOSYS (%#x), the kernel's own answer", got, uint32(retENOSYS))
	}
}
