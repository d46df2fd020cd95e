package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaveOrphan starts a group leader that starts a child in its group and
// exits, as a step's shell does with `cmd &` when kusaw is killed: the
// child is re-parented and runs on. It returns the leader's pid, its
// StartID and the orphan's pid.
func leaveOrphan(t *testing.T) (int, string, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "child")
	cmd := helperCmd("leave-child", pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := StartID(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("StartID: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leader: %v", err)
	}
	b, _ := os.ReadFile(pidFile)
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !Alive(child) {
		t.Fatalf("the orphan %q is not running", b)
	}
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	return cmd.Process.Pid, start, child
}

func waitDead(t *testing.T, pid int) bool {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !Alive(pid) {
			return true
		}
	}
	return false
}

func TestEndGroupEndsWhatTheLeaderLeft(t *testing.T) {
	leader, start, child := leaveOrphan(t)
	// A bystander in a group of its own, started later: untouched.
	by := helperCmd("sleep")
	by.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := by.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { by.Process.Kill(); by.Wait() }()

	n, err := EndGroup(leader, start)
	if err != nil || n != 1 {
		t.Fatalf("EndGroup = %d, %v; want the one orphan", n, err)
	}
	if !waitDead(t, child) {
		t.Fatalf("the orphan %d still runs", child)
	}
	if !Alive(by.Process.Pid) {
		t.Fatal("EndGroup killed a process of another group")
	}
}

// The twin: a start that does not match (the group's number was reused, or
// the record is from another boot) ends nothing.
func TestEndGroupLeavesAReusedNumberAlone(t *testing.T) {
	leader, start, child := leaveOrphan(t)
	boot, ticks, _ := strings.Cut(start, ":")
	for _, other := range []string{"another-boot:" + ticks, boot + ":" + "999999999999"} {
		n, err := EndGroup(leader, other)
		if err != nil || n != 0 {
			t.Fatalf("EndGroup(%q) = %d, %v; want nothing", other, n, err)
		}
	}
	if !Alive(child) {
		t.Fatal("a process was killed under a start that does not match")
	}
	// A live process holding the group's number with another start is
	// not the recorded leader.
	self, _ := StartID(os.Getpid())
	if n, _ := EndGroup(syscall.Getpgrp(), self+"0"); n != 0 {
		t.Fatalf("EndGroup on a live group with a wrong start signalled %d", n)
	}
	if n, _ := EndGroup(0, start); n != 0 {
		t.Fatal("EndGroup(0) signalled")
	}
}
