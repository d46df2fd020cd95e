//go:build linux

package sandbox

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkWriteLayerStart is what the write layer adds to a sandboxed
// true: the full sandbox path (BuildPlan, Command, Run, Cleanup) with the
// worktree under a layer (the stage's start in its own namespaces, the
// overlay mount, then bwrap) against the same plan without it,
// interleaved in one run. ms-layer-extra is the difference of the medians.
// Run: go test -run '^$' -bench WriteLayerStart -benchtime 50x ./sandbox/
func BenchmarkWriteLayerStart(b *testing.B) {
	needTool(b, "/usr/bin/bwrap", "the benchmark runs the real sandbox")
	f := newFixture(b)
	layer := newLayer(b, filepath.Join(f.attempt, "layer-1"))
	run := func(layered bool) time.Duration {
		in := f.input()
		in.LoginPaths = nil
		if layered {
			in.Worktrees[0].Layer = layer
		}
		t0 := time.Now()
		p, err := BuildPlan(in)
		if err != nil {
			b.Fatal(err)
		}
		cmd, err := Command(context.Background(), p, []string{"/bin/true"})
		if err != nil {
			b.Fatal(err)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("layered=%v: %v %s", layered, err, out)
		}
		p.Cleanup()
		return time.Since(t0)
	}
	run(true)
	run(false)
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		with = append(with, run(true))
		without = append(without, run(false))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2])
	}
	b.ReportMetric(med(with)/med(without), "x-no-layer")
	b.ReportMetric(med(with)/1e6, "ms-layer")
	b.ReportMetric(med(without)/1e6, "ms-no-layer")
	b.ReportMetric((med(with)-med(without))/1e6, "ms-layer-extra")
}
