package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/status"
)

const benchFactoryYAML = `version: 1
repos:
  app:
    path: app
%spipelines:
  default: [noop]
steps:
  noop:
    run: [true]
`

// peakRSS reads a process's peak resident set (VmHWM) in bytes (Linux).
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// BenchmarkServeQueue50 queues 50 no-op runs on kusaw serve at once and
// waits for all of them. It reports serve's throughput (runs/s), the same
// against a baseline measured in the same run (one in-process kusaw run of
// the same pipeline, as runs/s), lost runs (must be 0) and serve's peak
// RSS in MiB (target ≤ 150). max_parallel is the default (the number of
// cores) unless KUSAW_BENCH_PARALLEL sets it. Run: go test -run '^$' -bench ServeQueue50 -benchtime 1x ./e2e/
func BenchmarkServeQueue50(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("peak RSS is read from /proc (Linux)")
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := benchDir(b)
		// Baseline: one run in-process, the way kusaw run works without serve.
		start := time.Now()
		res := benchKusaw(b, dir, "run")
		base := time.Since(start)
		if res != 0 {
			b.Fatalf("baseline kusaw run exit %d", res)
		}
		sp := startServe(b, dir)
		b.StartTimer()
		start = time.Now()
		ids := make([]string, 0, 50)
		for j := 0; j < 50; j++ {
			rec, err := sp.client.Submit(context.Background(), "", nil)
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, rec.ID)
		}
		lost := 0
		for _, id := range ids {
			for {
				d, err := sp.client.Detail(context.Background(), id)
				if err != nil {
					b.Fatal(err)
				}
				if d.Run.State.Final() {
					if d.Run.State != status.RunSucceeded {
						lost++
					}
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		rss, err := peakRSS(sp.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		_ = sp.cmd.Process.Signal(os.Interrupt)
		_ = sp.cmd.Wait()
		tput := 50 / elapsed.Seconds()
		b.ReportMetric(tput, "runs/s")
		b.ReportMetric(tput*base.Seconds(), "x_inprocess_run")
		b.ReportMetric(float64(rss)/(1<<20), "peak_RSS_MiB")
		b.ReportMetric(float64(lost), "lost_runs")
		if lost > 0 {
			b.Errorf("%d of 50 runs did not succeed", lost)
		}
	}
}

func benchDir(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	p := filepath.Join(dir, "app")
	for _, args := range [][]string{{"init", "-q", "-b", "main", p}, {"-C", p, "-c", "user.email=b@example.invalid", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := execGit(args...); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	serve := "" // serve.max_parallel's default: the number of cores
	if benchParallel > 0 {
		serve = fmt.Sprintf("serve:\n  max_parallel: %d\n", benchParallel)
	}
	yaml := fmt.Sprintf(benchFactoryYAML, serve)
	if err := os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte(yaml), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func benchKusaw(b *testing.B, dir string, args ...string) int {
	b.Helper()
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = append(testEnv(nil, dir), "KUSAW_NO_SERVE=1")
	return exitCode(cmd.Run())
}

func execGit(args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	return cmd.CombinedOutput()
}

// benchParallel sets serve.max_parallel ($KUSAW_BENCH_PARALLEL); 0 keeps
// the default.
var benchParallel = func() int { n, _ := strconv.Atoi(os.Getenv("KUSAW_BENCH_PARALLEL")); return n }()
