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
// "setup-p50-ns setup-p99-ns bytes nanoseconds".
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
	fmt.Printf("%d %d %d %d\n", pct(ds, 0.5), pct(ds, 0.99), size*int64(rounds), total)
	return 0
}

type benchResult struct {
	p50, p99 time.Duration
	bytes    int64
	elapsed  time.Duration
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
	var r benchResult
	var p50, p99, el int64
	if _, err := fmt.Sscan(string(out), &p50, &p99, &r.bytes, &el); err != nil {
		b.Fatalf("bench client said %q", out)
	}
	r.p50, r.p99, r.elapsed = time.Duration(p50), time.Duration(p99), time.Duration(el)
	return r
}

// BenchmarkFullPath measures DESIGN §12's targets on the real path: a
// client inside bwrap's private network namespace, the bridge's handed-
// over listener, the proxy, a loopback upstream; against the same client
// connecting directly on the host. Run it with
//
//	go test -run '^$' -bench FullPath -benchtime 1x ./egress
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
	common := []string{benchClientEnv + "=1", "BENCH_HELLO=" + helloFile, "BENCH_SETUPS=500", "BENCH_SIZE=" + strconv.Itoa(256<<20), "BENCH_ROUNDS=3",
		"BENCH_TARGET=bench.test:" + port, "BENCH_DIRECT=" + up.Addr().String()}
	var direct, full benchResult
	for i := 0; i < b.N; i++ {
		direct = runBenchClient(b, exec.Command(self), append([]string{"PATH=/usr/bin:/bin"}, common...))
		e := newEnv(b, Options{}, LeaseConfig{SocketDir: b.TempDir(), Allow: rules(b, "bench.test:"+port), AllowRanges: loopback8})
		e.dns.set("bench.test", "127.0.0.1")
		full = runBenchClient(b, sandboxed(b, e.l, self), common)
		e.l.Close()
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(direct.p50), "direct-p50-ms")
	b.ReportMetric(ms(full.p50), "full-p50-ms")
	b.ReportMetric(ms(full.p99), "full-p99-ms")
	b.ReportMetric(ms(full.p50-direct.p50), "p50-overhead-ms")
	dr := float64(direct.bytes) / direct.elapsed.Seconds() / 1e6
	fr := float64(full.bytes) / full.elapsed.Seconds() / 1e6
	b.ReportMetric(dr, "direct-MB/s")
	b.ReportMetric(fr, "full-MB/s")
	b.ReportMetric(fr/dr, "full/direct")
}
