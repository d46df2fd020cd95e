package proc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is its own helper process: with helperEnv set it acts
// out the behaviour the variable names instead of running the tests.
const helperEnv = "KUSAW_PROC_HELPER"

func TestMain(m *testing.M) {
	MaybeReap(os.Args) // the reaper tests use this binary as the reaper
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func helper(what string, args []string) int {
	switch what {
	case "echo":
		fmt.Fprint(os.Stdout, strings.Join(args, " "))
		fmt.Fprint(os.Stderr, "err:"+strings.Join(args, " "))
		return 0
	case "exit":
		var n int
		fmt.Sscan(args[0], &n)
		return n
	case "leave-child":
		// Starts a long-lived child in the same group, writes its pid and
		// exits at once.
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), helperEnv+"=sleep")
		if err := c.Start(); err != nil {
			return 3
		}
		os.WriteFile(args[0], []byte(fmt.Sprint(c.Process.Pid)), 0o644)
		return 0
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 0
	}
	return 99
}

func helperCmd(what string, args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], args...)
	c.Env = append(os.Environ(), helperEnv+"="+what)
	return c
}

func TestRunOutputAndExit(t *testing.T) {
	var out, errb bytes.Buffer
	pid := 0
	res := Run(context.Background(), helperCmd("echo", "hello"), Options{Stdout: &out, Stderr: &errb, Started: func(p int) { pid = p }})
	if res.StartErr != nil || !res.HasExit || res.Exit != 0 || res.Stopped {
		t.Fatalf("result %+v", res)
	}
	if out.String() != "hello" || errb.String() != "err:hello" || pid == 0 {
		t.Errorf("stdout %q stderr %q pid %d", out.String(), errb.String(), pid)
	}
	res = Run(context.Background(), helperCmd("exit", "7"), Options{})
	if !res.HasExit || res.Exit != 7 || res.Describe() != "exit code 7" {
		t.Errorf("exit: %+v", res)
	}
}

func TestRunCopyFilter(t *testing.T) {
	var out bytes.Buffer
	up := func(dst io.Writer, src io.Reader) error {
		b, err := io.ReadAll(src)
		dst.Write(bytes.ToUpper(b))
		return err
	}
	Run(context.Background(), helperCmd("echo", "quiet"), Options{Stdout: &out, Copy: up})
	if out.String() != "QUIET" {
		t.Errorf("filtered output %q", out.String())
	}
}

func TestRunStartError(t *testing.T) {
	res := Run(context.Background(), exec.Command("/nonexistent/kusaw-proc-test"), Options{})
	if res.StartErr == nil {
		t.Fatalf("no start error: %+v", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := Run(ctx, helperCmd("echo"), Options{}); res.StartErr == nil {
		t.Errorf("started after cancel: %+v", res)
	}
}

func TestGroupKilledWhenLeaderExits(t *testing.T) {
	pidFile := t.TempDir() + "/child.pid"
	res := Run(context.Background(), helperCmd("leave-child", pidFile), Options{})
	if res.StartErr != nil || res.Exit != 0 {
		t.Fatalf("result %+v", res)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	deadline := time.Now().Add(5 * time.Second)
	for Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the child %d outlived its group's leader", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTermThenKill(t *testing.T) {
	for _, tc := range []struct {
		name, helper string
		min          time.Duration
		signal       string
	}{
		{"obeys SIGTERM", "sleep", 0, "terminated"},
		{"ignores SIGTERM", "ignore-term", 300 * time.Millisecond, "killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			res := Run(ctx, helperCmd(tc.helper), Options{Grace: 300 * time.Millisecond})
			took := time.Since(start) - 300*time.Millisecond
			if res.Signal != tc.signal || !res.Stopped || res.HasExit {
				t.Errorf("signal %q stopped %v, want %q (%+v)", res.Signal, res.Stopped, tc.signal, res)
			}
			if took < tc.min || took > 5*time.Second {
				t.Errorf("ended %s after the deadline", took)
			}
		})
	}
}
