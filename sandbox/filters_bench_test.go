//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkKernelFilters: what the kernel filters add to a sandboxed
// `true`, interleaved in one run against the same bwrap argv without them:
//
//	ms-seccomp: + the seccomp filter (bwrap reads and installs it);
//	ms-confine: + the confinement stage (kusaw-bridge __confine: a fresh
//	            session keyring and Landlock, then exec);
//	ms-filters: both, what every Linux attempt pays. Target ≤ 1 ms.
//
// Run: go test -run '^$' -bench KernelFilters -benchtime 100x ./sandbox/
func BenchmarkKernelFilters(b *testing.B) {
	needTool(b, "/usr/bin/bwrap", "the benchmark runs the real sandbox")
	f := newFixture(b)
	in := f.input()
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
	// The stage as installed: kusaw-bridge, static, as make build makes it.
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-bench-bridge-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bridge := filepath.Join(dir, "kusaw-bridge")
	build := exec.Command("go", "build", "-ldflags", "-s -w", "-o", bridge, "github.com/kusaw/kusaw/cmd/kusaw-bridge")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building kusaw-bridge: %v\n%s", err, out)
	}
	base := append(p.Args(), p.envArgs()...)
	if !disableUsernsSupported(bw) {
		base = slices.DeleteFunc(base, func(s string) bool { return s == "--unshare-user" || s == "--disable-userns" })
	}
	base = append(base, "--ro-bind", bridge, bridge)
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	var w []string
	for _, r := range p.Writable {
		w = append(w, r.Path)
	}
	stage := append([]string{bridge, "__confine"}, append(confineArgsFor(w), "/bin/true")...)
	run := func(seccomp, confine bool) {
		args := slices.Clone(base)
		cmd := exec.Command(bw)
		cmd.Env = []string{}
		for i := 0; i < 1+p.dataFiles(); i++ {
			cmd.ExtraFiles = append(cmd.ExtraFiles, null)
		}
		if seccomp {
			fa, files, err := filterArgs(p, 3+len(cmd.ExtraFiles))
			if err != nil {
				b.Fatal(err)
			}
			defer files[0].Close()
			cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
			args = append(args, fa...)
		}
		args = append(args, "--")
		if confine {
			args = append(args, stage...)
		} else {
			args = append(args, "/bin/true")
		}
		cmd.Args = append([]string{bw}, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bwrap (seccomp %v, stage %v): %v %s", seccomp, confine, err, out)
		}
	}
	run(false, false)
	run(true, false)
	run(true, true)
	var t0s, t1s, t2s []time.Duration
	timeIt := func(f func()) time.Duration { t := time.Now(); f(); return time.Since(t) }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0s = append(t0s, timeIt(func() { run(false, false) }))
		t1s = append(t1s, timeIt(func() { run(true, false) }))
		t2s = append(t2s, timeIt(func() { run(true, true) }))
	}
	b.StopTimer()
	p.Cleanup()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e6
	}
	m0, m1, m2 := med(t0s), med(t1s), med(t2s)
	b.ReportMetric(m0, "ms-bwrap")
	b.ReportMetric(m1-m0, "ms-seccomp")
	b.ReportMetric(m2-m1, "ms-confine")
	b.ReportMetric(m2-m0, "ms-filters")
	b.ReportMetric(m2/m0, "x-bwrap")
	b.Logf("seccomp filter %d bytes; stage %s with %s writable paths", len(mustFilter(b)), bridge, strconv.Itoa(len(w)))
}

func mustFilter(b *testing.B) []byte {
	f, err := SeccompFilter()
	if err != nil {
		b.Fatal(err)
	}
	return f
}
