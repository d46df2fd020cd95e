//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/bridgebuild"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// BenchmarkAllowlistStart: an allowlist step's first programs, outside
// bwrap, interleaved: the stage running the bridge in its own start (one
// program, as now) against the stage exec'ing a second kusaw-bridge (two
// programs, as before; a copy of the binary, so the stage does not see its
// own), against the step alone. The proxy's end of the hand-over is this
// process (fakeLease).
//
//	go test -run '^$' -bench AllowlistStart -benchtime 200x ./cmd/kusaw-bridge/
func BenchmarkAllowlistStart(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "kusaw-bridge")
	build := exec.Command("go", "build", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building kusaw-bridge: %v\n%s", err, out)
	}
	other := filepath.Join(dir, "other", "kusaw-bridge")
	os.MkdirAll(filepath.Dir(other), 0o755)
	data, _ := os.ReadFile(bin)
	if err := os.WriteFile(other, data, 0o755); err != nil {
		b.Fatal(err)
	}
	sock := fakeLease(b)
	w := b.TempDir()
	argv := func(bridge string) []string {
		a := append([]string{bin, confine.Subcommand}, confine.Args([]string{w})...)
		a = append(a, bridge, "--lease", sock, "--listen", freePort(b), "--")
		return append(a, "/bin/true")
	}
	run := func(a []string) time.Duration {
		t := time.Now()
		if out, err := exec.Command(a[0], a[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", a, err, out)
		}
		return time.Since(t)
	}
	var one, two, bare []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		one = append(one, run(argv(bin)))
		two = append(two, run(argv(other)))
		bare = append(bare, run([]string{"/bin/true"}))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e6
	}
	b.ReportMetric(med(one), "ms-one-start")
	b.ReportMetric(med(two), "ms-two-starts")
	b.ReportMetric(med(bare), "ms-true")
	b.ReportMetric(med(two)-med(one), "ms-saved")
}

// BenchmarkStageStart: the confinement stage's own start, outside bwrap,
// interleaved: `kusaw-bridge __confine -w DIR -- /bin/true` with the stage
// in C (cgo, before the Go runtime) and in Go (CGO_ENABLED=0), against
// /bin/true alone. ms-c-over-true is what the stage in C adds to a step.
//
//	go test -run '^$' -bench StageStart -benchtime 300x ./cmd/kusaw-bridge/
func BenchmarkStageStart(b *testing.B) {
	if !bridgebuild.StaticCC() {
		b.Skip("no C compiler with a static C library: the C stage cannot be built")
	}
	dir := b.TempDir()
	binC, binGo := filepath.Join(dir, "c", "kusaw-bridge"), filepath.Join(dir, "go", "kusaw-bridge")
	for bin, withC := range map[string]bool{binC: true, binGo: false} {
		if err := bridgebuild.Build("", bin, withC); err != nil {
			b.Fatal(err)
		}
	}
	w := b.TempDir()
	stage := func(bin string) []string {
		return append(append([]string{bin, confine.Subcommand}, confine.Args([]string{w})...), "/bin/true")
	}
	lines := [][]string{stage(binC), stage(binGo), {"/bin/true"}}
	ts := make([][]time.Duration, len(lines))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range lines {
			l := (i + k) % len(lines)
			t := time.Now()
			if out, err := exec.Command(lines[l][0], lines[l][1:]...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %v\n%s", lines[l], err, out)
			}
			ts[l] = append(ts[l], time.Since(t))
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e6
	}
	c, g, bare := med(ts[0]), med(ts[1]), med(ts[2])
	b.ReportMetric(c, "ms-stage-c")
	b.ReportMetric(g, "ms-stage-go")
	b.ReportMetric(bare, "ms-true")
	b.ReportMetric(c-bare, "ms-c-over-true")
	b.ReportMetric(g-bare, "ms-go-over-true")
}
