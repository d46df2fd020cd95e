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
	"time"
)

// Each test here is bounded by itself: if its limit failed, the process
// would still end (a fixed number of processes, bytes or files), never
// take the machine.

func cgroupEnforces(name string) bool {
	return strings.HasPrefix(Enforcement()[name], "cgroup")
}

func TestOutputLimit(t *testing.T) {
	var out bytes.Buffer
	// 20 MiB at most, against a limit of 64 KiB.
	res := Run(context.Background(), exec.Command("sh", "-c", "head -c 20971520 /dev/zero"), Options{Stdout: &out, Limits: Limits{Output: 64 << 10}})
	if res.Limit != LimitOutput || res.Signal != "killed" {
		t.Fatalf("result %+v", res)
	}
	if out.Len() != 64<<10 {
		t.Errorf("kept %d bytes, want exactly the limit", out.Len())
	}
	// Twin: under the limit nothing happens.
	out.Reset()
	res = Run(context.Background(), exec.Command("sh", "-c", "head -c 1000 /dev/zero"), Options{Stdout: &out, Limits: Limits{Output: 64 << 10}})
	if res.Limit != "" || res.Exit != 0 || out.Len() != 1000 {
		t.Errorf("under the limit: %+v, %d bytes", res, out.Len())
	}
}

func TestPidsLimit(t *testing.T) {
	if !cgroupEnforces(LimitPids) {
		if os.Getenv("CI") == "true" && os.Geteuid() == 0 {
			t.Fatalf("CI runs as root and must have a pids cgroup: %s", Enforcement()[LimitPids])
		}
		t.Skipf("pids are not enforced by a cgroup here (%s); the rlimit is tested end to end as a normal user", Enforcement()[LimitPids])
	}
	// At most 100 sleeping processes, against a limit of 16.
	flood := `for i in $(seq 100); do (sleep 3) & done; wait; echo done`
	res := Run(context.Background(), exec.Command("sh", "-c", flood), Options{Limits: Limits{Pids: 16}})
	if res.Limit != LimitPids {
		t.Fatalf("result %+v", res)
	}
	// Twin: a few processes under the limit.
	res = Run(context.Background(), exec.Command("sh", "-c", `for i in 1 2 3; do (sleep 0.1) & done; wait`), Options{Limits: Limits{Pids: 16}})
	if res.Limit != "" || res.Exit != 0 {
		t.Errorf("under the limit: %+v", res)
	}
}

func TestMemoryLimit(t *testing.T) {
	// The shell holds the command's output in memory: 256 MiB at most,
	// against a limit of 32 MiB.
	hog := `x=$(head -c 268435456 /dev/zero | tr '\0' a); echo ${#x}`
	res := Run(context.Background(), exec.Command("sh", "-c", hog), Options{Limits: Limits{Memory: 32 << 20}})
	if cgroupEnforces(LimitMemory) {
		if res.Limit != LimitMemory {
			t.Fatalf("result %+v", res)
		}
	} else if res.Exit == 0 {
		t.Fatalf("the hog passed under RLIMIT_DATA: %+v", res)
	}
	res = Run(context.Background(), exec.Command("sh", "-c", `x=$(head -c 1048576 /dev/zero | tr '\0' a); echo ${#x}`), Options{Limits: Limits{Memory: 32 << 20}})
	if res.Limit != "" || res.Exit != 0 {
		t.Errorf("under the limit: %+v", res)
	}
}

func TestDiskLimit(t *testing.T) {
	dir := t.TempDir()
	// 40 files of 1 MiB over 4 seconds at most, against 4 MiB.
	fill := `for i in $(seq 40); do head -c 1048576 /dev/zero > "$0/f$i" || exit 1; sleep 0.1; done`
	res := Run(context.Background(), exec.Command("sh", "-c", fill, dir), Options{Limits: Limits{Disk: 4 << 20, DiskPaths: []string{dir}}})
	if res.Limit != LimitDisk {
		t.Fatalf("result %+v", res)
	}
	if n := diskUsage([]string{dir}); n >= 40<<20 {
		t.Errorf("%d bytes written", n)
	}
}

// The child groups go with their processes; nothing is left below
// kusaw's own group.
func TestGroupsRemoved(t *testing.T) {
	v1, v2, _ := cgroupRoots()
	Run(context.Background(), exec.Command("true"), Options{Name: "kusaw-test-removed", Limits: Limits{Pids: 64, Memory: 64 << 20}})
	for _, d := range append([]string{v2}, values(v1)...) {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "kusaw-test-removed")); err == nil {
			t.Errorf("group left in %s", d)
		}
	}
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// BenchmarkRunLimits: what limits add to starting and ending a process
// (the cgroup made and removed, rlimits, the /bin/sh that holds it until
// placed), against the same process without limits in the same run.
// Run: go test -run '^$' -bench RunLimits ./internal/proc/
func BenchmarkRunLimits(b *testing.B) {
	lim := Defaults(Limits{})
	lim.DiskPaths = []string{b.TempDir()}
	var tPlain, tLimited time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if r := Run(context.Background(), exec.Command("true"), Options{}); r.Exit != 0 {
			b.Fatal(r)
		}
		tPlain += time.Since(start)
		start = time.Now()
		if r := Run(context.Background(), exec.Command("true"), Options{Limits: lim}); r.Exit != 0 {
			b.Fatal(r)
		}
		tLimited += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tLimited.Microseconds())/n/1000, "limited-ms/op")
	b.ReportMetric(float64(tPlain.Microseconds())/n/1000, "plain-ms/op")
	b.ReportMetric(float64(tLimited-tPlain)/n/1e6, "added-ms/op")
}

// A kusaw killed with -9 leaves its child group and what runs in it; the
// next kusaw ends them. A group of a kusaw that still runs stays.
func TestReapStaleGroups(t *testing.T) {
	if !cgroupEnforces(LimitPids) {
		if os.Getenv("CI") == "true" && os.Geteuid() == 0 {
			t.Fatalf("CI runs as root and must have a pids cgroup: %s", Enforcement()[LimitPids])
		}
		t.Skipf("no pids cgroup here: %s", Enforcement()[LimitPids])
	}
	v1, _, _ := cgroupRoots()
	root := v1["pids"]
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, fmt.Sprintf("kusaw-%d-1", dead.Process.Pid))
	live := filepath.Join(root, fmt.Sprintf("kusaw-%d-99", os.Getpid()))
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { (&group{dirs: map[string]string{"a": stale, "b": live}}).close() })
	orphan := exec.Command("sleep", "30")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(stale, "cgroup.procs"), []byte(fmt.Sprint(orphan.Process.Pid)), 0o644)
	done := make(chan struct{})
	go func() { orphan.Wait(); close(done) }()
	if n := ReapStaleGroups(); n < 1 {
		t.Fatalf("reaped %d groups", n)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the orphan in the stale group still runs")
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("the stale group was left")
	}
	if _, err := os.Stat(live); err != nil {
		t.Error("the group of a running kusaw was removed")
	}
}

func TestUserTasksCountsThisProcess(t *testing.T) {
	if n := userTasks(os.Getuid()); n < 1 {
		t.Fatalf("%d tasks of uid %d, this test's own among them", n, os.Getuid())
	}
}

// A program that cannot start still fails to start under limits (the
// holding shell is not put in its way).
func TestLimitsStartError(t *testing.T) {
	res := Run(context.Background(), exec.Command("/nonexistent/kusaw-proc-test"), Options{Limits: Limits{Pids: 64, Memory: 64 << 20}})
	if res.StartErr == nil {
		t.Fatalf("no start error: %+v", res)
	}
}
