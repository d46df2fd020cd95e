package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fullPathUpstream reads one TLS record (the client's hello), answers one
// byte, then closes on 'c' or streams until the client goes on 's'.
func fullPathUpstream(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	chunk := make([]byte, 256<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var hdr [5]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, c, int64(hdr[3])<<8|int64(hdr[4])); err != nil {
					return
				}
				c.Write([]byte{1})
				var cmd [1]byte
				if _, err := io.ReadFull(c, cmd[:]); err != nil {
					return
				}
				if cmd[0] == 'u' {
					io.Copy(io.Discard, c)
					return
				}
				if cmd[0] != 's' {
					return
				}
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln
}

type fullPathResult struct {
	P50, P99 float64 // microseconds
	Samples  int
	MiBps    float64 // download: the upstream sends
	UpMiBps  float64 // upload: the client sends
}

func parseFullPath(b *testing.B, out []byte, err error) fullPathResult {
	b.Helper()
	var r fullPathResult
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "{") {
			var m struct {
				P50     float64 `json:"p50_us"`
				P99     float64 `json:"p99_us"`
				Samples int     `json:"samples"`
				MiBps   float64 `json:"mib_per_s"`
				Up      float64 `json:"up_mib_per_s"`
			}
			if json.Unmarshal([]byte(l), &m) == nil {
				return fullPathResult{m.P50, m.P99, m.Samples, m.MiBps, m.Up}
			}
		}
	}
	b.Fatalf("bench client: %v\n%s", err, out)
	return r
}

// BenchmarkFullPathExec measures the CONNECT targets (docs/architecture.md, "Targets") on the
// product's own path: the Go client runs under `kusaw sandbox exec` with
// the step's real plan (network: allowlist), so each tunnel goes client →
// the bridge's handed-over listener → kusaw's proxy → a loopback upstream.
// The baseline is the same client on the host connecting straight to the
// upstream, in the same run. (egress's BenchmarkFullPath measures the
// proxy and bridge under a bare bwrap; this one adds nothing but the
// whole kusaw path around them.)
//
//	go test -run '^$' -bench FullPathExec -benchtime 1x ./e2e/
func BenchmarkFullPathExec(b *testing.B) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatal("bwrap is not installed (CI must have it)")
		}
		b.Skip("bwrap is not installed")
	}
	tools := b.TempDir()
	client := filepath.Join(tools, "egressclient")
	build := exec.Command("go", "build", "-o", client, "./testdata/egressclient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	up := fullPathUpstream(b)
	_, port, _ := net.SplitHostPort(up.Addr().String())
	dir := b.TempDir()
	app := filepath.Join(dir, "app")
	for _, args := range [][]string{{"init", "-q", "-b", "main", app}, {"-C", app, "-c", "user.email=b@example.invalid", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	yaml := `version: 1
repos:
  app: {path: ./app}
sandbox:
  mode: required
  network: allowlist
  allow_read: [` + tools + `]
  egress:
    allow: ["localhost:` + port + `"]
pipelines:
  default: [x]
steps:
  x:
    run: ["true"]
`
	if err := os.WriteFile(filepath.Join(dir, "factory.yaml"), []byte(yaml), 0o644); err != nil {
		b.Fatal(err)
	}
	secs := os.Getenv("KUSAW_BENCH_SECONDS")
	if secs == "" {
		secs = "4"
	}
	// The direct and full runs alternate, in rounds of half the time
	// each, so that both see the same load on a shared machine; the
	// figures are the means over the rounds.
	half := secs
	if f, err := strconv.ParseFloat(secs, 64); err == nil {
		half = strconv.FormatFloat(f/2, 'f', -1, 64)
	}
	var direct, full fullPathResult
	for i := 0; i < b.N; i++ {
		var ds, fs []fullPathResult
		for r := 0; r < 2; r++ {
			cmd := exec.Command(client, "bench", "127.0.0.1:"+port, half, "localhost", "direct")
			out, err := cmd.CombinedOutput()
			ds = append(ds, parseFullPath(b, out, err))
			cmd = exec.Command(kusawBin, "sandbox", "exec", "--step", "x", "--", client, "bench", "localhost:"+port, half, "localhost")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "KUSAW_SECRETS_DIR="+filepath.Join(dir, "secrets"))
			out, err = cmd.CombinedOutput()
			fs = append(fs, parseFullPath(b, out, err))
		}
		direct, full = meanFullPath(ds), meanFullPath(fs)
	}
	b.ReportMetric(direct.P50, "direct-p50-us")
	b.ReportMetric(full.P50, "full-p50-us")
	b.ReportMetric(full.P99, "full-p99-us")
	b.ReportMetric(full.P50-direct.P50, "p50-overhead-us")
	b.ReportMetric(direct.MiBps, "direct-MiB/s")
	b.ReportMetric(full.MiBps, "full-MiB/s")
	b.ReportMetric(full.MiBps/direct.MiBps, "down-ratio")
	b.ReportMetric(full.UpMiBps/direct.UpMiBps, "up-ratio")
	fmt.Printf("CONNECT full path (kusaw sandbox exec → bridge → proxy → loopback) vs direct loopback, 2 alternating rounds of %s s each:\n", half)
	fmt.Printf("  throughput down (upstream sends): %.0f MiB/s vs %.0f MiB/s = %.0f %% of direct (target ≥ 50 %%)\n", full.MiBps, direct.MiBps, 100*full.MiBps/direct.MiBps)
	fmt.Printf("  throughput up (client sends):     %.0f MiB/s vs %.0f MiB/s = %.0f %% of direct (target ≥ 50 %%)\n", full.UpMiBps, direct.UpMiBps, 100*full.UpMiBps/direct.UpMiBps)
	fmt.Printf("  load average: %s\n", loadavg())
	fmt.Printf("  set-up p50: %.0f µs vs %.0f µs = +%.3f ms over direct (target ≤ 0.3 ms); p99 %.0f µs vs %.0f µs; %d and %d samples (means of the rounds)\n",
		full.P50, direct.P50, (full.P50-direct.P50)/1000, full.P99, direct.P99, full.Samples, direct.Samples)
}

// meanFullPath averages rounds: latencies weighted by their samples,
// throughputs plainly.
func meanFullPath(rs []fullPathResult) fullPathResult {
	var m fullPathResult
	for _, r := range rs {
		m.P50 += r.P50 * float64(r.Samples)
		m.P99 += r.P99 * float64(r.Samples)
		m.Samples += r.Samples
		m.MiBps += r.MiBps / float64(len(rs))
		m.UpMiBps += r.UpMiBps / float64(len(rs))
	}
	if m.Samples > 0 {
		m.P50 /= float64(m.Samples)
		m.P99 /= float64(m.Samples)
	}
	return m
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
