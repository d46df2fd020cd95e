package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

const clusterBenchYAML = `version: 1
repos:
  app: {path: app}
serve:
  cluster: {listen: "127.0.0.1:0", local_worker: false}
pipelines:
  default: [nap]
steps:
  nap:
    run: [sh, -c, 'sleep 0.5; echo "$KUSAW_RUN" > nap.txt']
`

// BenchmarkClusterScale runs 12 runs of a sleeping step on 1 worker, then
// on 3 (each one attempt at a time), at default settings (serve's
// max_parallel is its cores; the workers' slots bound theirs), in one run of the benchmark: the
// ratio is the speed-up (target ≥ 2.7), and the processor time serve and
// the workers (with their git processes and steps) used per run in each
// round, which the machine's load moves less than the times. It also
// reports dispatch latency,
// from the attempt being ready on serve (its attempt.started: the spec is
// made, a bundle may follow) to serve hearing that its process started on
// a worker, p50 and p90 over 12 runs submitted one after the other to
// idle workers (target p50 ≤ 50 ms), and the part of it after serve
// published the attempt: queueing behind busy workers is not dispatch.
// Run: go test -run '^$' -bench ClusterScale -benchtime 1x ./e2e/
func BenchmarkClusterScale(b *testing.B) {
	for i := 0; i < b.N; i++ {
		one, cpu1, _, _ := clusterBenchRound(b, 1, false)
		three, cpu3, lat, pub := clusterBenchRound(b, 3, true)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		sort.Slice(pub, func(i, j int) bool { return pub[i] < pub[j] })
		b.ReportMetric(one.Seconds(), "s_1_worker")
		b.ReportMetric(three.Seconds(), "s_3_workers")
		b.ReportMetric(one.Seconds()/three.Seconds(), "x_speedup_3_vs_1")
		b.ReportMetric(float64(cpu1.Milliseconds())/12, "ms_cpu_per_run_1_worker")
		b.ReportMetric(float64(cpu3.Milliseconds())/12, "ms_cpu_per_run_3_workers")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms_dispatch_p50")
		b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "ms_dispatch_p90")
		b.ReportMetric(float64(pub[len(pub)/2].Microseconds())/1000, "ms_published_p50")
	}
}

// clusterBenchRound starts serve and n workers, runs 12 runs and returns
// the wall time from the first submit to the last run's end, and each
// attempt's dispatch latency.
func clusterBenchRound(b *testing.B, n int, latency bool) (time.Duration, time.Duration, []time.Duration, []time.Duration) {
	b.Helper()
	dir := b.TempDir()
	p := filepath.Join(dir, "app")
	for _, args := range [][]string{{"init", "-q", "-b", "main", p}, {"-C", p, "-c", "user.email=b@example.invalid", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := execGit(args...); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte(clusterBenchYAML), 0o644); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	sp := startServe(b, dir)
	pids := []int{sp.cmd.Process.Pid}
	for w := 0; w < n; w++ {
		tok := exec.Command(kusawBin, "cluster", "token")
		tok.Dir, tok.Env = dir, testEnv(nil, dir)
		out, err := tok.Output()
		if err != nil {
			b.Fatalf("kusaw cluster token: %v", err)
		}
		state := b.TempDir()
		cmd := exec.Command(kusawBin, "worker", "--join", strings.TrimSpace(string(out)), "--name", fmt.Sprintf("b%d", w),
			"--state-dir", filepath.Join(state, "w"), "--max-parallel", "1")
		cmd.Dir, cmd.Env = state, testEnv(nil, state)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
		b.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, _ := sp.client.Workers(context.Background())
		live := 0
		for _, w := range ws {
			if w.LastHeartbeat != nil {
				live++
			}
		}
		if live == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d workers did not come up", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.StartTimer()
	start, cpu0 := time.Now(), cpuOf(pids)
	ids := submitRuns(b, sp, 12)
	waitRuns(b, sp, ids)
	elapsed, cpu := time.Since(start), cpuOf(pids)-cpu0
	b.StopTimer()
	var lat, pub []time.Duration
	if latency {
		for j := 0; j < 12; j++ {
			id := submitRuns(b, sp, 1)
			waitRuns(b, sp, id)
			l, p, ok := dispatchLatency(filepath.Join(dir, ".kusaw", "runs", id[0], "steps", "nap", "1", record.EventsFile))
			if !ok {
				b.Fatalf("run %s: no dispatch latency in its events", id[0])
			}
			lat, pub = append(lat, l), append(pub, p)
		}
	}
	_ = sp.cmd.Process.Signal(os.Interrupt)
	_ = sp.cmd.Wait()
	return elapsed, cpu, lat, pub
}

// cpuOf is the processor time serve and the workers used so far, with
// the processes they waited for (git, the steps): user and system, from
// /proc/PID/stat (zero where it cannot be read).
func cpuOf(pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the command's name, in parentheses: utime, stime,
		// cutime and cstime are fields 14 to 17.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		for _, k := range []int{11, 12, 13, 14} {
			if k < len(f) {
				v, _ := strconv.ParseInt(f[k], 10, 64)
				ticks += v
			}
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

func submitRuns(b *testing.B, sp *serveProc, n int) []string {
	b.Helper()
	var ids []string
	for j := 0; j < n; j++ {
		rec, err := sp.client.Submit(context.Background(), "", nil)
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	return ids
}

func waitRuns(b *testing.B, sp *serveProc, ids []string) {
	b.Helper()
	for _, id := range ids {
		for {
			d, err := sp.client.Detail(context.Background(), id)
			if err != nil {
				b.Fatal(err)
			}
			if d.Run.State.Final() {
				if d.Run.State != status.RunSucceeded {
					b.Fatalf("run %s: %s %s", id, d.Run.State, d.Run.Message)
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// dispatchLatency is the time from an attempt's attempt.started (ready)
// and from its cluster.dispatched (published) to its process.started,
// all stamped by serve.
func dispatchLatency(path string) (ready, published time.Duration, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	var start, pub, to time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev record.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Type {
		case record.EvAttemptStarted:
			start = ev.TS
		case "cluster.dispatched":
			pub = ev.TS
		case record.EvProcessStarted:
			if to.IsZero() {
				to = ev.TS
			}
		}
	}
	return to.Sub(start), to.Sub(pub), !start.IsZero() && !pub.IsZero() && !to.IsZero()
}
