//go:build linux

package proc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needOwnGroup fails under CI (root, cgroups writable) and skips elsewhere
// when kusaw cannot write its own group's cgroup.procs.
func needOwnGroup(t testing.TB, l Limits) string {
	t.Helper()
	p := ownProcsFile(wanted(l))
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if p == "" || err != nil {
		if os.Getenv("CI") == "true" && os.Geteuid() == 0 {
			t.Fatalf("CI runs as root and must be able to write its own cgroup.procs (%q): %v", p, err)
		}
		t.Skipf("cannot write this process's own cgroup.procs (%q: %v): Prewarm does nothing here", p, err)
	}
	f.Close()
	return p
}

// Prewarm moves kusaw only into the group it already runs in, and stops
// when told to.
func TestPrewarmMovesNothingAndStops(t *testing.T) {
	lim := Limits{Pids: 64}
	needOwnGroup(t, lim)
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	start := prewarmWrites.Load()
	stop := Prewarm(lim)
	deadline := time.Now().Add(5 * time.Second)
	for prewarmWrites.Load() < start+3 {
		if time.Now().After(deadline) {
			t.Fatalf("Prewarm wrote %d times in 5 s", prewarmWrites.Load()-start)
		}
		time.Sleep(time.Millisecond)
	}
	// A limited process started meanwhile is placed and runs as usual.
	res := Run(context.Background(), exec.Command("true"), Options{Limits: lim})
	if res.StartErr != nil || res.Exit != 0 {
		t.Fatalf("limited process while prewarming: %+v", res)
	}
	stop()
	stop() // twice is fine
	n := prewarmWrites.Load()
	time.Sleep(20 * prewarmEvery)
	if m := prewarmWrites.Load(); m > n+1 {
		t.Errorf("Prewarm went on after stop: %d more writes", m-n)
	}
	after, _ := os.ReadFile("/proc/self/cgroup")
	if string(after) != string(before) {
		t.Errorf("kusaw's own groups changed:\nbefore %s\nafter %s", before, after)
	}
}

// Without limits that need a cgroup there is nothing to warm.
func TestPrewarmWithoutGroupDoesNothing(t *testing.T) {
	start := prewarmWrites.Load()
	stop := Prewarm(Limits{Output: 1 << 20, Disk: 1 << 20})
	time.Sleep(10 * prewarmEvery)
	stop()
	if n := prewarmWrites.Load() - start; n != 0 {
		t.Errorf("Prewarm wrote %d times for limits without a cgroup", n)
	}
}

// BenchmarkPlaceAfterPause: starting a limited process after a pause (an
// idle worker's next attempt), with Prewarm started 30 ms before (while
// git would make the worktree) against without, in the same run.
// Run: go test -run '^$' -bench PlaceAfterPause -benchtime 10x ./internal/proc/
func BenchmarkPlaceAfterPause(b *testing.B) {
	lim := Defaults(Limits{})
	lim.DiskPaths = []string{b.TempDir()}
	needOwnGroup(b, lim)
	var tCold, tWarm time.Duration
	for i := 0; i < b.N; i++ {
		for _, warm := range []bool{false, true} {
			b.StopTimer()
			time.Sleep(300 * time.Millisecond)
			stop := func() {}
			if warm {
				stop = Prewarm(lim)
				time.Sleep(30 * time.Millisecond)
			}
			b.StartTimer()
			start := time.Now()
			placed := time.Duration(0)
			r := Run(context.Background(), exec.Command("true"), Options{Limits: lim, Started: func(int) { placed = time.Since(start) }})
			stop()
			if r.Exit != 0 {
				b.Fatal(r)
			}
			if warm {
				tWarm += placed
			} else {
				tCold += placed
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(tWarm.Microseconds())/n/1000, "warm-ms/op")
	b.ReportMetric(float64(tCold.Microseconds())/n/1000, "cold-ms/op")
	b.ReportMetric(float64(tCold)/float64(tWarm), "x_faster")
}

// A Prewarm nobody stops ends at the next placement of a process.
func TestPrewarmEndsAtPlacement(t *testing.T) {
	lim := Limits{Pids: 64}
	needOwnGroup(t, lim)
	if !cgroupEnforces(LimitPids) {
		t.Fatalf("kusaw can write its own group but makes no pids group: %s", Enforcement()[LimitPids])
	}
	start := prewarmWrites.Load()
	Prewarm(lim)
	deadline := time.Now().Add(5 * time.Second)
	for prewarmWrites.Load() < start+2 {
		if time.Now().After(deadline) {
			t.Fatal("Prewarm did not start")
		}
		time.Sleep(time.Millisecond)
	}
	if res := Run(context.Background(), exec.Command("true"), Options{Limits: lim}); res.Exit != 0 {
		t.Fatalf("%+v", res)
	}
	time.Sleep(5 * prewarmEvery)
	n := prewarmWrites.Load()
	time.Sleep(20 * prewarmEvery)
	if m := prewarmWrites.Load(); m != n {
		t.Errorf("Prewarm went on after a placement: %d more writes", m-n)
	}
}

// Prewarm makes a group before it moves anything; the next limited
// process is placed into that group (limits written then), and a spare
// nobody took is removed when its Prewarm stops.
func TestPrewarmSpareGroup(t *testing.T) {
	lim := Limits{Pids: 64}
	needOwnGroup(t, lim)
	if !cgroupEnforces(LimitPids) {
		t.Fatalf("kusaw can write its own group but makes no pids group: %s", Enforcement()[LimitPids])
	}
	spareDir := func() string {
		spares.Lock()
		defer spares.Unlock()
		for _, s := range spares.list {
			return s.g.dirs["pids"]
		}
		return ""
	}
	waitSpare := func() string {
		deadline := time.Now().Add(5 * time.Second)
		for spareDir() == "" {
			if time.Now().After(deadline) {
				t.Fatal("Prewarm made no spare group")
			}
			time.Sleep(time.Millisecond)
		}
		return spareDir()
	}
	Prewarm(lim)
	dir := waitSpare()
	var out bytes.Buffer
	res := Run(context.Background(), exec.Command("sh", "-c", "cat /proc/self/cgroup; cat "+dir+"/pids.max"), Options{Limits: lim, Stdout: &out})
	if res.Exit != 0 {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(out.String(), "pids:/"+filepath.Base(dir)+"\n") || !strings.Contains(out.String(), "\n64\n") {
		t.Errorf("not placed into the spare %s with its limit:\n%s", dir, out.String())
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the spare %s outlived its process", dir)
	}

	// A spare made for other limits gets the process's own.
	Prewarm(lim)
	dir = waitSpare()
	out.Reset()
	res = Run(context.Background(), exec.Command("sh", "-c", "cat "+dir+"/pids.max"), Options{Limits: Limits{Pids: 32}, Stdout: &out})
	if res.Exit != 0 || strings.TrimSpace(out.String()) != "32" {
		t.Errorf("a spare made for pids 64, taken for 32: %q %+v", out.String(), res)
	}

	// Twin: a Prewarm stopped before any placement leaves nothing.
	stop := Prewarm(lim)
	dir = waitSpare()
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(dir); err != nil && spareDir() == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unused spare %s was not removed", dir)
		}
		time.Sleep(time.Millisecond)
	}
}
