package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/status"
)

// waitExit waits for a worker process to end and returns its exit code.
func (w *workerProc) waitExit(t *testing.T, limit time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("worker %s: %v", w.name, err)
		}
		return 0
	case <-time.After(limit):
		t.Fatalf("worker %s did not exit within %s:\n%s", w.name, limit, w.log.String())
		return -1
	}
}

// waitRunning waits until worker name reports n running attempts.
func (r *clusterRig) waitRunning(t *testing.T, name string, n int) {
	t.Helper()
	waitFor(t, name+" to run attempts", 30*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		for _, w := range ws {
			if w.Name == name && w.Running == n {
				return true
			}
		}
		return false
	})
}

// SIGTERM to a worker in the middle of two attempts (a service stop, an
// upgrade): it takes nothing new, both attempts finish and pass on it, it
// exits 0, the runs' next steps go to another worker, and every run
// succeeds with nothing lost. Then kusaw workers drain does the same from
// serve's side.
func TestClusterWorkerDrains(t *testing.T) {
	need(t, "git")
	r := startClusterServe(t, clusterYAML(clusterSandbox(t), "3", "15s"))
	drainer := r.startWorker(t, "drainer")
	r.waitWorkers(t, 1)
	ids := r.submit(t, 2)
	r.waitRunning(t, "drainer", 2)
	if err := drainer.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	taker := r.startWorker(t, "taker")
	if code := drainer.waitExit(t, time.Minute); code != 0 || !strings.Contains(drainer.log.String(), "drained") {
		t.Fatalf("the drained worker exited %d:\n%s", code, drainer.log.String())
	}
	// By serve: a third worker, asked to drain while it runs one.
	third := r.startWorker(t, "third")
	r.waitWorkers(t, 2)
	more := r.submit(t, 1)
	var held string
	waitFor(t, "a worker to hold the last run's attempt", 30*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		for _, w := range ws {
			if w.Running > 0 && w.Name != "drainer" && !w.Draining && !w.Stopped {
				held = w.Name
				return true
			}
		}
		return false
	})
	res := runKusaw(t, r.dir, "workers", "drain", held)
	if res.code != 0 || !strings.Contains(res.stdout, "drains") {
		t.Fatalf("kusaw workers drain %s: %d %s %s", held, res.code, res.stdout, res.stderr)
	}
	w := third
	if held == "taker" {
		w = taker
	}
	per := r.checkRuns(t, append(ids, more...))
	for _, id := range append(ids, more...) {
		d := waitDetail(t, r.sp.client, id, time.Second)
		for _, a := range d.Attempts {
			if a.Outcome != status.OutcomePassed {
				t.Errorf("run %s attempt %s/%d: %s on %s (%s): a drain lost nothing", id, a.Step, a.Number, a.Outcome, a.Worker, a.Message)
			}
		}
		if id != more[0] && (d.Attempts[0].Worker != "drainer" || d.Attempts[1].Worker == "drainer") {
			t.Errorf("run %s: step one on %s, step two on %s: want one on the draining worker, two elsewhere", id, d.Attempts[0].Worker, d.Attempts[1].Worker)
		}
	}
	t.Logf("attempts per worker: %v", per)
	if code := w.waitExit(t, time.Minute); code != 0 {
		t.Errorf("the worker serve drained exited %d:\n%s", code, w.log.String())
	}
	if res := runKusaw(t, r.dir, "workers", "drain", "nobody"); res.code != int(status.ExitUsage) || !strings.Contains(res.stderr, "no worker named nobody") {
		t.Errorf("draining an unknown worker: %d %s", res.code, res.stderr)
	}
}

// Attacker's side: a worker retired with kusaw workers retire in the
// middle of an attempt. Serve closes its connection and its key cannot
// connect again (exit 10, even restarted from its own folder); its name
// cannot be enrolled again; the attempt it held ends lost. The twin:
// another worker takes the attempt and the run succeeds, and log verify
// still checks everything.
func TestClusterWorkerRetired(t *testing.T) {
	need(t, "git")
	r := startClusterServe(t, clusterYAML(clusterSandbox(t), "3", "15s"))
	old := r.startWorker(t, "old")
	r.waitWorkers(t, 1)
	ids := r.submit(t, 1)
	r.waitRunning(t, "old", 1)
	res := runKusaw(t, r.dir, "workers", "retire", "old")
	if res.code != 0 || !strings.Contains(res.stdout, "retired (1 attempt") {
		t.Fatalf("kusaw workers retire old: %d %s %s", res.code, res.stdout, res.stderr)
	}
	if code := old.waitExit(t, time.Minute); code != int(status.ExitNotEnrolled) || !strings.Contains(old.log.String(), "retired") {
		t.Errorf("the retired worker exited %d:\n%s", code, old.log.String())
	}
	old.log = &syncBuffer{}
	old.start(t)
	if code := old.waitExit(t, time.Minute); code != int(status.ExitNotEnrolled) {
		t.Errorf("the retired worker started again: exit %d\n%s", code, old.log.String())
	}
	if ls := runKusaw(t, r.dir, "workers"); strings.Contains(ls.stdout, "old") {
		t.Errorf("kusaw workers lists the retired worker:\n%s", ls.stdout)
	}
	again := r.startWorker(t, "old")
	if code := again.waitExit(t, time.Minute); code != int(status.ExitNotEnrolled) || !strings.Contains(again.log.String(), "retired") {
		t.Errorf("a new worker enrolled under the retired name: exit %d\n%s", code, again.log.String())
	}
	r.startWorker(t, "new")
	r.checkRuns(t, ids)
	d := waitDetail(t, r.sp.client, ids[0], time.Second)
	if a := d.Attempts[0]; a.Worker != "old" || a.Outcome != status.OutcomeLost || !strings.Contains(a.Message, "retired") {
		t.Errorf("the retired worker's attempt: %s %q on %s", a.Outcome, a.Message, a.Worker)
	}
	for _, a := range d.Attempts[1:] {
		if a.Worker != "new" {
			t.Errorf("attempt %s/%d on %s, want new", a.Step, a.Number, a.Worker)
		}
	}
	if res := runKusaw(t, r.dir, "workers", "retire", "old"); res.code != int(status.ExitUsage) {
		t.Errorf("retiring a retired worker: %d %s", res.code, res.stderr)
	}
}
