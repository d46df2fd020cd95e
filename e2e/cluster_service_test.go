package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A worker as a service: its join token comes from KUSAW_JOIN_TOKEN (or
// --join-file), never its command line; --max-parallel and --pool are
// kept in its folder, so a start without them (a service restart) keeps
// them; kusaw service install --worker writes a unit whose stop drains.
func TestClusterWorkerAsService(t *testing.T) {
	need(t, "git")
	r := startClusterServe(t, clusterYAML(`"off"`, "0", "15s"))
	tok := strings.TrimSpace(runKusaw(t, r.dir, "cluster", "token").stdout)
	state := filepath.Join(t.TempDir(), "w")
	start := func(extra ...string) *workerProc {
		w := &workerProc{name: "svc", log: &syncBuffer{}}
		cmd := exec.Command(kusawBin, append([]string{"worker", "--name", "svc", "--state-dir", state}, extra...)...)
		cmd.Env = append(testEnv(t, filepath.Dir(state)), "KUSAW_JOIN_TOKEN="+tok)
		cmd.Stderr = w.log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.cmd = cmd
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return w
	}
	w := start("--max-parallel", "3", "--pool", "default")
	r.waitWorkers(t, 1)
	if b, _ := os.ReadFile(filepath.Join("/proc", itoa(w.cmd.Process.Pid), "cmdline")); strings.Contains(string(b), "kusaw-join") {
		t.Errorf("the join token is on the worker's command line: %q", b)
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	if code := w.waitExit(t, time.Minute); code != 0 {
		t.Fatalf("the worker's SIGTERM: exit %d\n%s", code, w.log.String())
	}
	// Started again with nothing but its folder (the spent token is
	// still in the environment: it keeps its enrollment).
	again := start()
	waitFor(t, "the restarted worker with its kept settings", 30*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		return len(ws) == 1 && !ws[0].Lost && !ws[0].Stopped && ws[0].MaxParallel == 3 && strings.Join(ws[0].Pools, ",") == "default"
	})
	_ = again.cmd.Process.Signal(syscall.SIGTERM)
	again.waitExit(t, time.Minute)

	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "cfg")}
	res := runKusawEnv(t, r.dir, env, "service", "install", "--worker", "--state-dir", state)
	units, _ := filepath.Glob(filepath.Join(home, "cfg", "systemd", "user", "kusaw-worker-*.service"))
	if res.code != 0 || len(units) != 1 {
		t.Fatalf("service install --worker: %d %v %s %s", res.code, units, res.stdout, res.stderr)
	}
	unit := readFile(t, units[0])
	for _, want := range []string{"ExecStart=" + kusawBin + " worker --state-dir " + state, "KillMode=mixed", "KillSignal=SIGTERM", "TimeoutStopSec=660"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the worker's unit lacks %q:\n%s", want, unit)
		}
	}
	if res := runKusawEnv(t, r.dir, env, "service", "uninstall", "--worker", "--state-dir", state); res.code != 0 {
		t.Errorf("service uninstall --worker: %d %s", res.code, res.stderr)
	}
}
