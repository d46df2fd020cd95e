//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// expandArgs is the argument list bwrap acts on: args with "--args 3"
// replaced by file's NUL-separated arguments, as bwrap reads it.
func expandArgs(t *testing.T, args []string, file []byte) []string {
	t.Helper()
	i := slices.Index(args, "--args")
	if i < 0 || i+1 >= len(args) || args[i+1] != "3" {
		t.Fatalf("no --args 3 in %q", args)
	}
	inner := strings.Split(strings.TrimSuffix(string(file), "\x00"), "\x00")
	return append(append(slices.Clone(args[:i]), inner...), args[i+2:]...)
}

// earlyPlan is the fixture's plan, which has empty files (descriptors)
// and stand-in folders, and an environment.
func earlyPlan(t *testing.T, f *fixture) *Plan {
	t.Helper()
	p, err := BuildPlan(f.input())
	if err != nil {
		t.Fatal(err)
	}
	if p.dataFiles() == 0 || len(p.standInDirs) == 0 || len(p.Env) == 0 {
		t.Fatalf("the fixture's plan should have empty files (%d), stand-in folders (%d) and an environment (%d)",
			p.dataFiles(), len(p.standInDirs), len(p.Env))
	}
	return p
}

func earlyShape(t *testing.T, p *Plan, argv []string) StartShape {
	t.Helper()
	s, ok, err := ShapeOf(p, argv)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		if os.Getenv("CI") == "true" {
			t.Fatal("this bwrap has no --disable-userns (before 0.8): CI must have bubblewrap 0.8 or later")
		}
		t.Skip("this bwrap has no --disable-userns (before 0.8): no early start")
	}
	return s
}

// The argv an early bwrap acts on (its command line with the pipe's
// content in place of --args) is Command's (with its --args file in
// place), with the sentinel in front, and it gets as many descriptors.
func TestEarlyStartSameArgvAsCommand(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "an early start is a real bwrap")
	f := newFixture(t)
	argv := []string{"/bin/true", "a b"}
	p, p2 := earlyPlan(t, f), earlyPlan(t, f) // both before a start takes the stand-ins
	cmd, err := Command(context.Background(), p, argv)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	envFile, err := io.ReadAll(cmd.ExtraFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{earlySentinel}, expandArgs(t, cmd.Args[1:], envFile)...)

	st, err := startArgs(p2, argv)
	if err != nil {
		t.Fatal(err)
	}
	e, err := StartEarly(earlyShape(t, p2, argv), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if e.args[0] != cmd.Path {
		t.Errorf("early bwrap %s, Command's %s", e.args[0], cmd.Path)
	}
	got := expandArgs(t, e.args[1:], earlyOptions(st))
	if !slices.Equal(got, want) {
		t.Errorf("the early start's argv differs from Command's:\n got %q\nwant %q", got, want)
	}
	if e.files != len(cmd.ExtraFiles) {
		t.Errorf("early bwrap has %d descriptors from 3 on, Command's %d", e.files, len(cmd.ExtraFiles))
	}
	// No value of the environment on bwrap's command line (but the
	// paths the stage's -w names, which Command's shows too).
	line, before := strings.Join(e.args, "\x00"), strings.Join(cmd.Args, "\x00")
	for _, kv := range p2.Env {
		if _, v, _ := strings.Cut(kv, "="); len(v) > 3 && strings.Contains(line, v) && !strings.Contains(before, v) {
			t.Errorf("the environment's value %q is on the early bwrap's command line", v)
		}
	}
}

// What the step sees from inside is the same whether its bwrap started
// early or after its plan: the environment, the mounts, the descriptors,
// the kernel filter, the folder.
func TestEarlyStartSameSandbox(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "an early start is a real bwrap")
	f := newFixture(t)
	script := `env | sort; cut -d' ' -f4-6 /proc/self/mountinfo; ls /proc/self/fd; grep -E '^(Seccomp|NoNewPrivs|CapEff)' /proc/self/status; pwd; ls -a`
	argv := []string{"/bin/sh", "-c", script}
	run := func(early bool) string {
		out, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		p := earlyPlan(t, f)
		defer p.Cleanup()
		if early {
			e, serr := StartEarly(earlyShape(t, p, argv), nil, out, out)
			if serr != nil {
				t.Fatal(serr)
			}
			proc, cerr := e.Command(p, argv, nil, out, out)
			if cerr != nil {
				t.Fatal(cerr)
			}
			if ws, werr := proc.Wait(); werr != nil || ws.ExitStatus() != 0 {
				err = fmt.Errorf("%v, exit status %d", werr, ws.ExitStatus())
			}
		} else {
			c, cerr := Command(context.Background(), p, argv)
			if cerr != nil {
				t.Fatal(cerr)
			}
			c.Stdout, c.Stderr = out, out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			err = c.Wait()
		}
		if err != nil {
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("early=%v: %v\n%s", early, err, b)
		}
		b, err := os.ReadFile(out.Name())
		if err != nil {
			t.Fatal(err)
		}
		// bwrap's empty files are bound from a temporary name of its own.
		return bindfile.ReplaceAllString(string(b), "/bindfile")
	}
	normal, early := run(false), run(true)
	if normal != early {
		t.Errorf("the step sees another sandbox after an early start:\n--- after the plan\n%s\n--- early\n%s", normal, early)
	}
	if !strings.Contains(early, "Seccomp:\t2") || !strings.Contains(early, "STEP_TOKEN=declared-by-step") {
		t.Errorf("the early step has no filter or no environment:\n%s", early)
	}
}

// A plan whose start is not the early one's shape gets ErrShapeChanged:
// the early bwrap is killed and waited for, and no stand-in is taken.
func TestEarlyStartShapeChangedLeavesNothing(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "an early start is a real bwrap")
	f := newFixture(t)
	argv := []string{"/bin/true"}
	for _, change := range []struct {
		name string
		edit func(*StartShape)
	}{
		{"another command", func(s *StartShape) { s.Tail = append(slices.Clone(s.Tail[:len(s.Tail)-1]), "/bin/false") }},
		{"one empty file fewer", func(s *StartShape) { s.Data-- }},
	} {
		t.Run(change.name, func(t *testing.T) {
			p := earlyPlan(t, f)
			defer p.Cleanup()
			s := earlyShape(t, p, argv)
			change.edit(&s)
			e, err := StartEarly(s, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Command(p, argv, nil, nil, nil); !errors.Is(err, ErrShapeChanged) {
				t.Fatalf("Command = %v, want ErrShapeChanged", err)
			}
			checkReaped(t, e)
			for _, d := range p.standInDirs {
				if _, err := os.Lstat(d); err == nil {
					t.Errorf("stand-in %s was taken for a start that did not happen", d)
				}
			}
		})
	}
}

// Stop kills an early bwrap and waits for it: no process is left.
func TestEarlyStartStopLeavesNoProcess(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "an early start is a real bwrap")
	f := newFixture(t)
	p := earlyPlan(t, f)
	e, err := StartEarly(earlyShape(t, p, []string{"/bin/true"}), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Stop()
	checkReaped(t, e)
	e.Stop() // again: nothing
	if _, err := e.Command(p, []string{"/bin/true"}, nil, nil, nil); !errors.Is(err, ErrShapeChanged) {
		t.Errorf("Command after Stop = %v, want ErrShapeChanged", err)
	}
}

// If kusaw dies before it wrote the options (its end of the pipe closed
// with nothing in it), bwrap refuses at once on the sentinel and runs
// nothing.
func TestEarlyStartPipeClosedRunsNothing(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "an early start is a real bwrap")
	f := newFixture(t)
	p := earlyPlan(t, f)
	marker := filepath.Join(t.TempDir(), "ran")
	argv := []string{"/bin/sh", "-c", "echo ran > " + marker}
	s := earlyShape(t, p, argv)
	var errb bytes.Buffer
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	e, err := StartEarly(s, nil, nil, w)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	e.w.Close() // as kusaw's exit would
	e.ended = true
	ws, err := e.proc.Wait()
	io.Copy(&errb, r)
	if err != nil || ws.ExitStatus() == 0 {
		t.Fatalf("bwrap ran with no options: %v, exit status %d", err, ws.ExitStatus())
	}
	if !strings.Contains(errb.String(), "--disable-userns requires --unshare-user") {
		t.Errorf("bwrap did not stop on the sentinel: %v %s", err, errb.String())
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
}

var bindfile = regexp.MustCompile(`/bindfile[A-Za-z0-9]{6}`)

func checkReaped(t *testing.T, e *EarlyStart) {
	t.Helper()
	if !e.proc.reaped {
		t.Fatal("the early bwrap was not waited for")
	}
	if err := syscall.Kill(e.proc.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d is still there (%v)", e.proc.Pid, err)
	}
}
