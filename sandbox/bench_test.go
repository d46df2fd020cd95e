//go:build linux

package sandbox

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkSandboxTrue runs `true` three ways in the same run, interleaved
// so machine load hits all alike, and reports median ratios:
//
//	x-bwrap: the full sandbox path (BuildPlan, Command, Run, Cleanup) over
//	         the same bwrap argv (mounts, flags, env as --setenv) run directly;
//	bwrap-x-true: that bare bwrap over bare /bin/true.
//
// Target (docs/architecture.md, "Targets"): x-bwrap ≤ 1.5.
// Run: go test -run '^$' -bench SandboxTrue -benchtime 50x ./sandbox/
func BenchmarkSandboxTrue(b *testing.B) {
	needTool(b, "/usr/bin/bwrap", "the benchmark runs the real sandbox")
	f := newFixture(b)
	for _, net := range []string{NetworkNone, NetworkOpen} {
		b.Run("network="+net, func(b *testing.B) { benchTrue(b, f, net) })
	}
}

func benchTrue(b *testing.B, f *fixture, network string) {
	in := f.input()
	in.Network = network
	p, err := BuildPlan(in)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Prepare(); err != nil {
		b.Fatal(err)
	}
	bw, err := FindBwrap()
	if err != nil {
		b.Fatal(err)
	}
	// The same argv, run directly: env inline, no memfd, no plan building.
	direct := append(p.Args(), p.envArgs()...)
	if !disableUsernsSupported(bw) {
		direct = slices.DeleteFunc(direct, func(s string) bool { return s == "--unshare-user" || s == "--disable-userns" })
	}
	direct = append(direct, "--", "/bin/true")
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	runDirect := func() {
		cmd := exec.Command(bw, direct...)
		cmd.Env = []string{}
		// fd 3 unused here, then the empty files' descriptors (DataFD on).
		for i := 0; i < 1+p.dataFiles(); i++ {
			cmd.ExtraFiles = append(cmd.ExtraFiles, null)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bare bwrap: %v %s", err, out)
		}
		p.Cleanup()
	}
	runSandbox := func() {
		pl, err := BuildPlan(in)
		if err != nil {
			b.Fatal(err)
		}
		cmd, err := Command(context.Background(), pl, []string{"/bin/true"})
		if err != nil {
			b.Fatal(err)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("sandbox: %v %s", err, out)
		}
		pl.Cleanup()
	}
	runTrue := func() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	// Warm up caches once each.
	runDirect()
	runSandbox()
	runTrue()
	var tTrue, tDirect, tSandbox []time.Duration
	timeIt := func(f func()) time.Duration { t0 := time.Now(); f(); return time.Since(t0) }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tTrue = append(tTrue, timeIt(runTrue))
		tDirect = append(tDirect, timeIt(runDirect))
		tSandbox = append(tSandbox, timeIt(runSandbox))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2])
	}
	b.ReportMetric(med(tSandbox)/med(tDirect), "x-bwrap")
	b.ReportMetric(med(tDirect)/med(tTrue), "bwrap-x-true")
	b.ReportMetric(med(tSandbox)/1e6, "ms-sandbox")
	b.ReportMetric(med(tDirect)/1e6, "ms-bwrap")
	b.ReportMetric(med(tTrue)/1e6, "ms-true")
	b.Logf("%d mounts: %s", len(p.Mounts), strings.Join(p.Args()[:6], " "))
}

// BenchmarkViewVsHostRoot is what the allowlist view costs a bwrap start:
// the plan's own argv (system folders, toolchains of the PATH, the empty
// home, then the attempt's mounts, the read-only root last) against the
// same argv with the view's base replaced by the host's / read-only (the
// view before #24), interleaved in one run, bare bwrap both.
// Run: go test -run '^$' -bench ViewVsHostRoot -benchtime 100x ./sandbox/
func BenchmarkViewVsHostRoot(b *testing.B) {
	needTool(b, "/usr/bin/bwrap", "the benchmark runs the real sandbox")
	f := newFixture(b)
	in := f.input()
	in.Network = NetworkNone
	p, err := BuildPlan(in)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Prepare(); err != nil {
		b.Fatal(err)
	}
	old := *p
	old.Mounts = []Mount{{Op: "ro-bind", Src: "/", Dst: "/"}}
	for _, m := range p.Mounts {
		base := m.Origin == OriginSystem && (m.Op == "ro-bind" || m.Op == "symlink" || m.Dst == "/")
		if base || m.Origin == OriginToolchain || m.Origin == OriginHome {
			continue
		}
		old.Mounts = append(old.Mounts, m)
	}
	bw, err := FindBwrap()
	if err != nil {
		b.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	run := func(pl *Plan) func() {
		argv := append(pl.Args(), pl.envArgs()...)
		if !disableUsernsSupported(bw) {
			argv = slices.DeleteFunc(argv, func(s string) bool { return s == "--unshare-user" || s == "--disable-userns" })
		}
		argv = append(argv, "--", "/bin/true")
		return func() {
			cmd := exec.Command(bw, argv...)
			cmd.Env = []string{}
			for i := 0; i < 1+pl.dataFiles(); i++ {
				cmd.ExtraFiles = append(cmd.ExtraFiles, null)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("bwrap: %v %s", err, out)
			}
		}
	}
	view, root := run(p), run(&old)
	view()
	root()
	var tView, tRoot []time.Duration
	timeIt := func(f func()) time.Duration { t0 := time.Now(); f(); return time.Since(t0) }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tRoot = append(tRoot, timeIt(root))
		tView = append(tView, timeIt(view))
	}
	b.StopTimer()
	p.Cleanup()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2])
	}
	b.ReportMetric(med(tView)/med(tRoot), "view-x-root")
	b.ReportMetric(med(tView)/1e6, "ms-view")
	b.ReportMetric(med(tRoot)/1e6, "ms-root")
	b.Logf("view: %d mounts, host root: %d mounts", len(p.Mounts), len(old.Mounts))
}
