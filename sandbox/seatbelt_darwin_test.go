//go:build darwin

package sandbox

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These run on a Mac only: the real sandbox-exec, a real pty. The escape
// suite is e2e/escape_darwin_test.go.

func needSeatbelt(t *testing.T) {
	t.Helper()
	if r := CheckSeatbelt(); !r.Available {
		msg := "the Seatbelt backend cannot run here: " + r.Msg
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// macPlan is a plan on a real folder: a worktree-like folder and a temp
// folder, both writable.
func macPlan(t *testing.T) *Plan {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wt, tmp := filepath.Join(root, "wt"), filepath.Join(root, "tmp")
	for _, d := range []string{wt, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &Plan{Backend: "seatbelt", Network: NetworkNone, Workdir: wt,
		Mounts: []Mount{{Op: "ro-bind", Src: "/", Dst: "/"}, {Op: "bind", Src: wt, Dst: wt}, {Op: "bind", Src: tmp, Dst: tmp}},
		Env:    []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp, "HOME=/Users/nobody-real"}}
}

func TestCheckSeatbeltHere(t *testing.T) {
	r := CheckSeatbelt()
	if !r.Available {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%+v", r)
		}
		t.Skipf("not available: %s", r.Msg)
	}
	if r.Backend != "seatbelt" || r.Path != SandboxExecPath {
		t.Errorf("%+v", r)
	}
	if c := Check(); c.Backend != "seatbelt" || !c.Available {
		t.Errorf("Check on macOS is not the Seatbelt check: %+v", c)
	}
}

func TestSeatbeltFreshHomeAndNoTerminal(t *testing.T) {
	needSeatbelt(t)
	p := macPlan(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", `test "$HOME" = "$TMPDIR/home" && test "$CFFIXED_USER_HOME" = "$HOME" && test -z "$(ls -A "$HOME")" && echo fresh > "$HOME/x" && if (exec 3</dev/tty) 2>/dev/null; then echo TTY; fi; echo done`})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	KillGroup(cmd)
	if strings.Contains(out.String(), "TTY") || !strings.Contains(out.String(), "done") {
		t.Errorf("the step could open a controlling terminal, or did not finish:\n%s", out.String())
	}
}

// TestSeatbeltPTY: with a terminal, the step's stdio is a pty of its own,
// not kusaw's terminal.
func TestSeatbeltPTY(t *testing.T) {
	needSeatbelt(t)
	// kusaw's "terminal": the terminal side of a pty the test holds.
	userMaster, userTerm, userName, err := openPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer userMaster.Close()
	defer userTerm.Close()
	p := macPlan(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := SeatbeltCommand(ctx, p, []string{"/bin/sh", "-c", `test -t 0 && test -t 1 && echo "tty=$(tty)"`}, SeatbeltOptions{}, userTerm)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, userMaster); close(done) }()
	if err := c.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	userTerm.Close()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	s := out.String()
	if !strings.Contains(s, "tty=/dev/ttys") || strings.Contains(s, "tty="+userName) {
		t.Errorf("the step's terminal is not a pty of its own (kusaw's is %s):\n%q", userName, s)
	}
}

// TestSeatbeltNastyPathsOnMac: sandbox-exec carries folder names with
// quotes, parentheses, '=', spaces and a newline as parameters: the named
// folder is writable, its sibling is not, and nothing else opened up.
func TestSeatbeltNastyPathsOnMac(t *testing.T) {
	needSeatbelt(t)
	for _, name := range []string{`w")(allow default)(`, "w=eq=sign", "w with spaces (and parens)", "w\nnewline", `w;comment #"^/"`} {
		t.Run(strings.ReplaceAll(name, "\n", `\n`), func(t *testing.T) {
			root, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			w, sib, tmp := filepath.Join(root, name), filepath.Join(root, "sibling "+name), filepath.Join(root, "tmp")
			for _, d := range []string{w, sib, tmp} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			p := &Plan{Backend: "seatbelt", Network: NetworkNone, Workdir: w,
				Mounts: []Mount{{Op: "ro-bind", Src: "/", Dst: "/"}, {Op: "bind", Src: w, Dst: w}, {Op: "bind", Src: tmp, Dst: tmp},
					{Op: "ro-bind", Src: sib, Dst: sib}},
				Env: []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp}}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			script := `echo ok > "$0/f" || exit 1; (echo x > "$1/f") 2>/dev/null && exit 2; (echo x > "$2/f") 2>/dev/null && exit 3; exit 0`
			cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", script, w, sib, root})
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.CombinedOutput()
			KillGroup(cmd)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if _, err := os.Stat(filepath.Join(w, "f")); err != nil {
				t.Errorf("the named folder was not written: %v", err)
			}
			for _, d := range []string{sib, root} {
				if _, err := os.Stat(filepath.Join(d, "f")); err == nil {
					t.Errorf("%q was written", d)
				}
			}
		})
	}
}
