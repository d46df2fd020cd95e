//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A copy of this test binary started with KUSAW_E2E_SUBREAPER=1 runs its
// arguments as a child subreaper: every process they leave behind
// becomes its child, so it can tell that kusaw left none (a running
// process or one that ended unwaited for). It prints "left ..." per
// process and "exit N" last.
func init() {
	if os.Getenv("KUSAW_E2E_SUBREAPER") != "1" {
		return
	}
	os.Exit(subreaper(os.Args[1:]))
}

func subreaper(args []string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Println("subreaper:", err)
		return 1
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			fmt.Println("subreaper:", err)
			return 1
		}
		code = ee.ExitCode()
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err != nil { // ECHILD: nothing left
			break
		}
		if pid > 0 {
			fmt.Printf("left %d, ended unwaited for\n", pid)
			continue
		}
		// Still running: name them, end them, and look again.
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
				cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				fmt.Printf("left %d, running: %s\n", p, strings.ReplaceAll(string(cl), "\x00", " "))
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		_, _ = syscall.Wait4(-1, &ws, 0, nil)
	}
	fmt.Printf("exit %d\n", code)
	return 0
}

// execEarly runs kusaw sandbox exec -- argv in dir under a subreaper and
// returns its output and exit status; with noneLeft, it fails the test on
// any process kusaw left behind. (A run whose step ran may leave bwrap's
// own helper, PID 1 inside, an orphan for a moment: bwrap exits with the
// step's status without waiting for it; so only runs that never got to
// a start of their own are held to none.)
func execEarly(t *testing.T, noneLeft bool, dir string, env []string, argv ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{kusawBin, "sandbox", "exec", "--"}, argv...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "KUSAW_E2E_SUBREAPER=1")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("subreaper: %v\n%s", err, out)
	}
	if noneLeft && (strings.Contains(out, "\nleft ") || strings.HasPrefix(out, "left ")) {
		t.Errorf("kusaw left processes behind:\n%s", out)
	}
	i := strings.LastIndex(out, "exit ")
	code, _ := strconv.Atoi(strings.TrimSpace(out[i+5:]))
	return out[:i], code
}

// kusaw sandbox exec starts bwrap before its plan when it has started one
// in the same folder before, and gives it the plan's options on a pipe;
// a start whose shape changed falls back to an ordinary one; a plan that
// fails after the early start, or a run that never gets to its plan,
// leaves no process and takes no stand-in.
func TestSandboxExecEarlyStart(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bwrap is not installed (CI must have it)")
		}
		t.Skip("bwrap is not installed")
	}
	dir, cache := t.TempDir(), t.TempDir()
	env := []string{"XDG_CACHE_HOME=" + cache, "KUSAW_SECRETS_DIR=" + t.TempDir()}
	shapes := filepath.Join(cache, "kusaw", "exec-start")
	// From inside, /proc/1 is bwrap's own process: its command line says
	// how it was started.
	show := []string{"/bin/sh", "-c", `echo ran; tr '\0' ' ' < /proc/1/cmdline`}
	early := func(out string) bool { return strings.Contains(out, "bwrap --disable-userns --args 3 -- ") }

	out, code := execEarly(t, false, dir, env, show...)
	if code != 0 || !strings.Contains(out, "ran") || early(out) {
		t.Fatalf("the first run (nothing remembered): exit %d, early %v\n%s", code, early(out), out)
	}
	b, err := os.ReadFile(shapes)
	if err != nil || !strings.Contains(string(b), strconv.Quote(dir)) {
		t.Fatalf("the folder's start is not remembered: %v\n%s", err, b)
	}
	out, code = execEarly(t, false, dir, env, show...)
	if code != 0 || !strings.Contains(out, "ran") || !early(out) {
		t.Fatalf("the second run: exit %d, early %v\n%s", code, early(out), out)
	}
	if strings.Contains(out, "--setenv") || strings.Contains(out, "--ro-bind") {
		t.Errorf("the plan's options are on bwrap's command line:\n%s", out)
	}
	// The early bwrap's end is the command's: its status, 128+n for a
	// signal, and a SIGTERM to kusaw ends it (the whole group) with 143.
	out, code = execEarly(t, false, dir, env, "/bin/sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; exit 7`)
	if code != 7 || !early(out) {
		t.Errorf("an early command's exit 7: exit %d, early %v\n%s", code, early(out), out)
	}
	out, code = execEarly(t, false, dir, env, "/bin/sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; kill -KILL $$`)
	if code != 128+9 || !early(out) {
		t.Errorf("an early command killed: exit %d, want 137, early %v\n%s", code, early(out), out)
	}
	term := exec.Command(kusawBin, "sandbox", "exec", "--", "/bin/sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; echo; echo started; exec sleep 60`)
	term.Dir, term.Env = dir, append(os.Environ(), env...)
	stdout, err := term.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := term.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if !early(line) {
		t.Errorf("the run to stop did not start early: %q", line)
	}
	term.Process.Signal(syscall.SIGTERM)
	if err := term.Wait(); exitCode(err) != 128+15 {
		t.Errorf("kusaw sandbox exec stopped by SIGTERM: %v, want exit 143", err)
	}

	// The plan fails (a HOME that is not an absolute path) after bwrap
	// started early: kusaw says so, and leaves no process and no stand-in.
	pool := filepath.Join(cache, "kusaw", "stand-ins")
	spares, _ := os.ReadDir(pool)
	out, code = execEarly(t, true, dir, append(env, "HOME=relative-home"), show...)
	if code != 4 || !strings.Contains(out, "plan_refused") || strings.Contains(out, "ran") {
		t.Fatalf("a failing plan: exit %d\n%s", code, out)
	}
	if names := ls(t, dir); len(names) != 0 {
		t.Errorf("the failed run left %v in the folder", names)
	}
	if after, _ := os.ReadDir(pool); len(after) != len(spares) {
		t.Errorf("the failed run took stand-ins: %d spares before, %d after", len(spares), len(after))
	}

	// The folder changes what the plan's start is (one empty file fewer
	// to make): the early bwrap does not fit and is ended, an ordinary
	// start runs, and the new shape is remembered for the next.
	if err := os.WriteFile(filepath.Join(dir, ".mcp.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = execEarly(t, false, dir, env, show...)
	if code != 0 || !strings.Contains(out, "ran") || early(out) {
		t.Fatalf("a changed shape: exit %d, early %v\n%s", code, early(out), out)
	}
	out, code = execEarly(t, false, dir, env, show...)
	if code != 0 || !strings.Contains(out, "ran") || !early(out) {
		t.Fatalf("after a changed shape: exit %d, early %v\n%s", code, early(out), out)
	}

	// A factory file appears: sandbox exec runs the factory's way and
	// never reaches the default plan; the early bwrap leaves no process,
	// and the folder is forgotten.
	if err := os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte("not: [a factory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code = execEarly(t, true, dir, env, show...); code == 0 {
		t.Fatal("a broken factory file ran")
	}
	if b, _ := os.ReadFile(shapes); strings.Contains(string(b), strconv.Quote(dir)) {
		t.Errorf("the folder is still remembered:\n%s", b)
	}
}

func ls(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		if e.Name() != ".mcp.json" {
			names = append(names, e.Name())
		}
	}
	return names
}
