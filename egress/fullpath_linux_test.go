package egress

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The full-path benchmark runs this test binary again as the client:
// inside bwrap behind the bridge (through the proxy), and on the host
// straight to the upstream (the baseline).
const benchClientEnv = "KUSAW_EGRESS_BENCH_CLIENT"

func init() {
	if os.Getenv(benchClientEnv) == "1" {
		os.Exit(benchClient())
	}
}

// benchClient times connection set-ups and bulk transfers and prints
// "bytes nanoseconds" and then every set-up time in nanoseconds.
func benchClient() int {
	hello, err := os.ReadFile(os.Getenv("BENCH_HELLO"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	setups, _ := strconv.Atoi(os.Getenv("BENCH_SETUPS"))
	size, _ := strconv.ParseInt(os.Getenv("BENCH_SIZE"), 10, 64)
	rounds, _ := strconv.Atoi(os.Getenv("BENCH_ROUNDS"))
	var p benchPath
	if proxy := os.Getenv("HTTPS_PROXY"); proxy != "" {
		p = proxyPath(strings.TrimPrefix(proxy, "http://"), os.Getenv("BENCH_TARGET"), hello)
	} else {
		p = directPath(os.Getenv("BENCH_DIRECT"), hello)
	}
	var ds []time.Duration
	for i := 0; i < setups; i++ {
		c, _, d, err := p.setup()
		if err != nil {
			fmt.Fprintln(os.Stderr, "setup:", err)
			return 1
		}
		c.Close()
		ds = append(ds, d)
	}
	buf := make([]byte, 256<<10)
	var total time.Duration
	for i := 0; i < rounds; i++ {
		d, err := p.transfer(size, buf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "transfer:", err)
			return 1
		}
		total += d
	}
	fmt.Printf("%d %d", size*int64(rounds), total)
	for _, d := range ds {
		fmt.Printf(" %d", d)
	}
	fmt.Println()
	return 0
}

type benchResult struct {
	setups  []time.Duration
	bytes   int64
	elapsed time.Duration
}

func (r *benchResult) add(o benchResult) {
	r.setups = append(r.setups, o.setups...)
	r.bytes += o.bytes
	r.elapsed += o.elapsed
}

func runBenchClient(b *testing.B, cmd *exec.Cmd, env []string) benchResult {
	b.Helper()
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		b.Fatalf("bench client: %v %s", err, msg)
	}
	f := strings.Fields(string(out))
	var r benchResult
	var el int64
	if len(f) < 2 {
		b.Fatalf("bench client said %q", out)
	}
	if _, err := fmt.Sscan(f[0]+" "+f[1], &r.bytes, &el); err != nil {
		b.Fatalf("bench client said %q", out)
	}
	r.elapsed = time.Duration(el)
	for _, s := range f[2:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatalf("bench client said %q", out)
		}
		r.setups = append(r.setups, time.Duration(n))
	}
	return r
}

// BenchmarkFullPath measures the targets (docs/architecture.md, "Targets") on the real path: a
// client inside bwrap's private network namespace, the bridge's handed-
// over listener, the proxy, a loopback upstream; against the same client
// connecting directly on the host. Run it with
//
//	go test -run '^$' -bench FullPath -benchtime 1x ./egress
//
// Every client is a process of its own, as a step is: the set-up rounds
// alternate direct, host-proxy and full so that all three see the same
// load. host-proxy is the same client on the host through a lease that
// listens on the host's loopback: the proxy hop without sandbox, bridge
// or namespace, which tells the cost of the proxy apart from the cost of
// the bridge.
func BenchmarkFullPath(b *testing.B) {
	needBwrap(b)
	hello := captureHello(b, "bench.test")
	up := benchUpstream(b, len(hello))
	port := strconv.Itoa(portOf(b, up.Addr().String()))
	dir := b.TempDir()
	helloFile := filepath.Join(dir, "hello")
	os.WriteFile(helloFile, hello, 0o644)
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	common := []string{benchClientEnv + "=1", "BENCH_HELLO=" + helloFile,
		"BENCH_TARGET=bench.test:" + port, "BENCH_DIRECT=" + up.Addr().String()}
	const rounds = 5
	setupsOnly := []string{"BENCH_SETUPS=200", "BENCH_SIZE=0", "BENCH_ROUNDS=0"}
	transfers := []string{"BENCH_SETUPS=0", "BENCH_SIZE=" + strconv.Itoa(256<<20), "BENCH_ROUNDS=3"}
	allow := rules(b, "bench.test:"+port)
	var direct, host, full benchResult
	for i := 0; i < b.N; i++ {
		eh := newEnv(b, Options{}, LeaseConfig{Allow: allow, AllowRanges: loopback8})
		eh.dns.set("bench.test", "127.0.0.1")
		hostEnv := append([]string{"PATH=/usr/bin:/bin", "HTTPS_PROXY=" + eh.l.ProxyURL()}, common...)
		directEnv := append([]string{"PATH=/usr/bin:/bin"}, common...)
		fullPath := func(extra []string) benchResult {
			e := newEnv(b, Options{}, LeaseConfig{SocketDir: b.TempDir(), Allow: allow, AllowRanges: loopback8})
			e.dns.set("bench.test", "127.0.0.1")
			defer e.l.Close()
			return runBenchClient(b, sandboxed(b, e.l, self), append(append([]string{}, common...), extra...))
		}
		for r := 0; r < rounds; r++ {
			direct.add(runBenchClient(b, exec.Command(self), append(directEnv, setupsOnly...)))
			host.add(runBenchClient(b, exec.Command(self), append(hostEnv, setupsOnly...)))
			full.add(fullPath(setupsOnly))
		}
		eh.l.Close()
		direct.add(runBenchClient(b, exec.Command(self), append(directEnv, transfers...)))
		full.add(fullPath(transfers))
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(pct(direct.setups, 0.5)), "direct-p50-ms")
	b.ReportMetric(ms(pct(host.setups, 0.5)), "hostproxy-p50-ms")
	b.ReportMetric(ms(pct(full.setups, 0.5)), "full-p50-ms")
	b.ReportMetric(ms(pct(full.setups, 0.99)), "full-p99-ms")
	b.ReportMetric(ms(pct(full.setups, 0.5)-pct(direct.setups, 0.5)), "p50-overhead-ms")
	dr := float64(direct.bytes) / direct.elapsed.Seconds() / 1e6
	fr := float64(full.bytes) / full.elapsed.Seconds() / 1e6
	b.ReportMetric(dr, "direct-MB/s")
	b.ReportMetric(fr, "full-MB/s")
	b.ReportMetric(fr/dr, "full/direct")
}
