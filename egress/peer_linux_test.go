package egress

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The attack: another sandbox that holds the path of this lease's
// hand-over socket hands over a listener of its own network namespace,
// to be served with this lease's allowlist. With AwaitPeer the lease
// admits only a process below the sandbox kusaw named (ExpectPeer): the
// intruder's bridge is refused and its step never runs. The twin: the
// lease's own sandbox hands over and reaches an allowed host.
func TestHandOverRefusesAnotherSandbox(t *testing.T) {
	curl := needCurl(t)
	up := tlsUpstream(t, http.HandlerFunc(hello))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	e := newEnv(t, Options{}, LeaseConfig{SocketDir: t.TempDir(), AwaitPeer: true, Allow: rules(t, "allowed.test:"+port), AllowRanges: loopback8})
	e.dns.set("allowed.test", "127.0.0.1")
	dir := filepath.Dir(e.l.SocketPath())

	// The intruder connects first; the lease waits for its own sandbox's
	// process before it judges anyone.
	intruder := sandboxed(t, e.l, "/bin/echo", "STEP-RAN")
	var istderr bytes.Buffer
	intruder.Stdout, intruder.Stderr = &istderr, &istderr
	if err := intruder.Start(); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	writeCA(t, caFile)
	own := sandboxed(t, e.l, "/bin/sh", "-c", curl+" -sS --max-time 10 --cacert "+caFile+" https://allowed.test:"+port+"/ok")
	var out bytes.Buffer
	own.Stdout, own.Stderr = &out, &out
	// Its own sandbox starts only once the intruder waits on the socket.
	waitConnected(t, e, intruder.Process.Pid)
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	e.l.ExpectPeer(own.Process.Pid)

	err := intruder.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != BridgeExitHandOver || !strings.Contains(istderr.String(), "refused the peer") || !strings.Contains(istderr.String(), "does not run below") {
		t.Fatalf("the intruder's hand-over: %v %s", err, istderr.String())
	}
	if strings.Contains(istderr.String(), "STEP-RAN") {
		t.Fatal("the intruder's step ran")
	}
	if err := own.Wait(); err != nil || !strings.Contains(out.String(), "hello from allowed.test") {
		t.Fatalf("the lease's own sandbox: %v\n%s", err, out.String())
	}
	e.rec.wait(t, "the refusal recorded", func(d Decision) bool {
		return d.Kind == KindHandOver && d.Decision == Fail && strings.Contains(d.Detail, "refused the peer")
	})
}

// Without AwaitPeer a process below kusaw may hand over; a sandbox that
// is not (another kusaw's: here one detached from the test process) is
// refused.
func TestHandOverRefusesSandboxOutsideKusaw(t *testing.T) {
	e := newEnv(t, Options{}, LeaseConfig{SocketDir: t.TempDir()})
	log := filepath.Join(t.TempDir(), "bridge.log")
	cmd := sandboxed(t, e.l, "/bin/echo", "STEP-RAN")
	// sh starts bwrap in the background and exits: bwrap is orphaned and
	// no longer below the test process.
	detached := exec.Command("/bin/sh", append([]string{"-c", `"$@" >` + log + ` 2>&1 & echo $!`, "sh"}, cmd.Args...)...)
	detached.Env = cmd.Env
	pidOut, err := detached.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidOut)))
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the detached sandbox did not end")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := os.ReadFile(log)
	if !strings.Contains(string(b), "refused the peer") || strings.Contains(string(b), "STEP-RAN") {
		t.Fatalf("a sandbox outside kusaw's process tree handed over: %s", b)
	}
	if e.l.HandedOver() {
		t.Fatal("handed over")
	}
	// Twin: the same sandbox started below kusaw hands over.
	cmd = sandboxed(t, e.l, "/bin/echo", "STEP-RAN")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "STEP-RAN") {
		t.Fatalf("the sandbox below kusaw: %v %s", err, out)
	}
	if !e.l.HandedOver() {
		t.Fatal("not handed over")
	}
}

// waitConnected waits until the sandbox bwrap started has connected to
// the lease's hand-over socket. The connection's far end belongs to the
// sandbox's network namespace: it shows in /proc/net/unix as read through
// bwrap's child, which lives there.
func waitConnected(t *testing.T, e *env, bwrap int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", bwrap, bwrap))
		for _, k := range strings.Fields(string(kids)) {
			b, _ := os.ReadFile("/proc/" + k + "/net/unix")
			if strings.Contains(string(b), " "+e.l.SocketPath()+"\n") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox did not connect to the hand-over socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeCA(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: getCA(t).cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
}
