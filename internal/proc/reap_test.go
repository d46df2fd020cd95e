//go:build linux

package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A reaped process under limits: the reaper holds itself until it is
// placed (no /bin/sh between kusaw and the reaper), the program runs in
// the group, below the reaper, with no descriptor of the hold, and its
// exit status comes through. The twin without limits runs the reaper
// unheld.
func TestReaperHoldsItself(t *testing.T) {
	EnableReaper(os.Args[0])
	t.Cleanup(func() { EnableReaper("") })
	// The shell's descriptors are listed first, into a file, before any
	// command substitution: a substitution's pipe is the shell's own for a
	// moment, and a listing inside one could see its write end (CI saw
	// "3 4" against "3" under load).
	script := `ls /proc/$$/fd > "$FDS"; p=$(cut -d' ' -f4 /proc/$$/stat); tr '\0' ' ' < /proc/$p/cmdline; echo; cat /proc/$$/cgroup; echo FDS $(cat "$FDS"); exit 7`
	fdSets := map[bool]string{} // what the program holds, held or not
	for _, limited := range []bool{true, false} {
		t.Run(fmt.Sprint("limited=", limited), func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", script)
			cmd.Env = append(os.Environ(), "FDS="+filepath.Join(t.TempDir(), "fds"))
			Reaped(cmd)
			if cmd.Args[1] != ReapArg {
				t.Fatalf("not reaped: %v", cmd.Args)
			}
			var out, errb bytes.Buffer
			o := Options{Stdout: &out, Stderr: &errb}
			if limited {
				o.Limits = Limits{Pids: 64, Disk: 1 << 30, DiskPaths: []string{t.TempDir()}}
			}
			res := Run(context.Background(), cmd, o)
			if res.StartErr != nil || res.Exit != 7 {
				t.Fatalf("result %+v, stderr %s", res, errb.String())
			}
			lines := strings.Split(out.String(), "\n")
			parent := lines[0]
			want := ReapArg
			if limited {
				want = reapHeldArg
			}
			if !strings.Contains(parent, want) || strings.Contains(parent, "kusaw-hold") {
				t.Errorf("the program's parent is %q, want the reaper with %s", parent, want)
			}
			o2 := out.String()
			fdSets[limited] = strings.TrimSpace(o2[strings.LastIndex(o2, "FDS ")+4:])
			if limited && cgroupEnforces(LimitPids) && !strings.Contains(out.String(), "pids:/") {
				t.Errorf("no pids group in %s", out.String())
			}
			if limited && cgroupEnforces(LimitPids) && !strings.Contains(out.String(), "kusaw-") {
				t.Errorf("the program is not in kusaw's group:\n%s", out.String())
			}
		})
	}
	if fdSets[true] != fdSets[false] {
		t.Errorf("the held program holds other descriptors: %q, unheld %q", fdSets[true], fdSets[false])
	}
}

// A held reaper that is never released (kusaw gives up: the write end
// closes) starts nothing.
func TestHeldReaperNotReleased(t *testing.T) {
	marker := t.TempDir() + "/ran"
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], reapHeldArg, "3", "/bin/sh", "sh", "-c", "touch "+marker)
	cmd.ExtraFiles = []*os.File{r}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 126 {
		t.Errorf("held reaper without its line: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the program ran without the reaper being released")
	}
}
