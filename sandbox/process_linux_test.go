//go:build linux

package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A process started without os/exec gets what Command's bwrap gets: no
// environment, /dev/null for a stream not given, its own process group;
// its status comes back, and once reaped it is never signalled.
func TestStartProcess(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	p, err := startProcess([]string{"/bin/sh", "-c", `env -0 | tr '\0' '\n' | grep -v -e '^PWD=' -e '^SHLVL=' -e '^_=' -e '^OLDPWD='; readlink /proc/self/fd/0; [ "$(ps -o pgid= $$)" -eq $$ ] || echo not its own group; exit 3`}, []*os.File{nil, out, out})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := p.Wait()
	if err != nil || !ws.Exited() || ws.ExitStatus() != 3 {
		t.Fatalf("status %v (exited %v, %d), want exit 3", err, ws.Exited(), ws.ExitStatus())
	}
	b, _ := os.ReadFile(out.Name())
	if string(b) != "/dev/null\n" {
		t.Errorf("the child saw an environment, another stdin or group:\n%s", b)
	}
	if err := p.Kill(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Kill after Wait: %v, want os.ErrProcessDone", err)
	}
	if ws2, _ := p.Wait(); ws2 != ws {
		t.Errorf("a second Wait gave %v, the first %v", ws2, ws)
	}

	p, err = startProcess([]string{"/bin/sleep", "60"}, []*os.File{nil, nil, nil})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if ws, err := p.Wait(); err != nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("killed: %v, signaled %v %v", err, ws.Signaled(), ws.Signal())
	}
	if _, err := startProcess([]string{"/nonexistent/bwrap"}, []*os.File{nil, nil, nil}); err == nil {
		t.Error("a missing program started")
	}
}
