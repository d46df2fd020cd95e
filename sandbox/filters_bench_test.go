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

	"github.com/kusaw/kusaw/internal/bridgebuild"
)

// BenchmarkKernelFilters: what the kernel filters add to a sandboxed
// `true`, interleaved in one run against the same bwrap argv without them:
//
//	ms-seccomp: + the seccomp filter (bwrap reads and installs it);
//	ms-mask:    + the /proc/keys mask (one more bind);
//	ms-confine: + the confinement stage (kusaw-bridge __confine: a fresh
//	            session keyring and Landlock, then exec), in Go
//	            (kusaw-bridge built with CGO_ENABLED=0);
//	ms-confine-c: the same stage in C (kusaw-bridge built with cgo, the
//	            stage run before the Go runtime starts), as make build
//	            makes it where a C compiler is;
//	ms-filters: all three with the C stage (the Go one without a C
//	            compiler), what an attempt without an allowlist pays
//	            (with one, the stage runs in the bridge's own start).
//	            Target ≤ 1 ms. ms-filters-go: the same with the Go stage.
//
// Run: go test -run '^$' -bench KernelFilters -benchtime 100x ./sandbox/
func BenchmarkKernelFilters(b *testing.B) {
	needTool(b, "/usr/bin/bwrap", "the benchmark runs the real sandbox")
	f := newFixture(b)
	bw, err := FindBwrap()
	if err != nil {
		b.Fatal(err)
	}
	// The stage as installed: kusaw-bridge, static, as make build makes it,
	// bound read-only by the plan like any program kusaw runs inside.
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-bench-bridge-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bridge := filepath.Join(dir, "go", "kusaw-bridge")
	if err := bridgebuild.Build("", bridge, false); err != nil {
		b.Fatal(err)
	}
	bridgeC := bridge
	if bridgebuild.StaticCC() {
		bridgeC = filepath.Join(dir, "c", "kusaw-bridge")
		if err := bridgebuild.Build("", bridgeC, true); err != nil {
			b.Fatal(err)
		}
	} else {
		b.Log("no C compiler with a static C library: ms-confine-c is the Go stage again")
	}
	in := f.input()
	in.ExtraBinaries = []string{bridge, bridgeC}
	p, err := BuildPlan(in)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Prepare(); err != nil {
		b.Fatal(err)
	}
	base := append(p.Args(), p.envArgs()...)
	if !disableUsernsSupported(bw) {
		base = slices.DeleteFunc(base, func(s string) bool { return s == "--unshare-user" || s == "--disable-userns" })
	}
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
	stageC := append([]string{bridgeC}, stage[1:]...)
	// level 0: the plan's argv alone; 1: + the seccomp filter; 2: + the
	// /proc/keys mask (what filterArgs gives); 3: + the Go stage; 4: + the
	// C stage instead.
	run := func(level int) {
		args := slices.Clone(base)
		cmd := exec.Command(bw)
		cmd.Env = []string{}
		for i := 0; i < 1+p.dataFiles(); i++ {
			cmd.ExtraFiles = append(cmd.ExtraFiles, null)
		}
		if level >= 1 {
			fa, files, err := filterArgs(p, 3+len(cmd.ExtraFiles))
			if err != nil {
				b.Fatal(err)
			}
			defer files[0].Close()
			cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
			if level == 1 {
				fa = fa[:2] // --seccomp FD only
			}
			args = append(args, fa...)
		}
		args = append(args, "--")
		if level == 4 {
			args = append(args, stageC...)
		} else if level == 3 {
			args = append(args, stage...)
		} else {
			args = append(args, "/bin/true")
		}
		cmd.Args = append([]string{bw}, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bwrap (level %d): %v %s", level, err, out)
		}
	}
	const levels = 5
	for l := 0; l < levels; l++ {
		run(l)
	}
	ts := make([][]time.Duration, levels)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Each order in turn, so no level always follows the same one.
		for k := 0; k < levels; k++ {
			l := (i + k) % levels
			t := time.Now()
			run(l)
			ts[l] = append(ts[l], time.Since(t))
		}
	}
	b.StopTimer()
	p.Cleanup()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e6
	}
	m0, m1, m2, m3, m4 := med(ts[0]), med(ts[1]), med(ts[2]), med(ts[3]), med(ts[4])
	b.ReportMetric(m0, "ms-bwrap")
	b.ReportMetric(m1-m0, "ms-seccomp")
	b.ReportMetric(m2-m1, "ms-mask")
	b.ReportMetric(m3-m2, "ms-confine")
	b.ReportMetric(m4-m2, "ms-confine-c")
	b.ReportMetric(m4-m0, "ms-filters")
	b.ReportMetric(m3-m0, "ms-filters-go")
	b.ReportMetric(m4/m0, "x-bwrap")
	b.Logf("seccomp filter %d bytes; stages %s, %s with %s writable paths", len(mustFilter(b)), bridge, bridgeC, strconv.Itoa(len(w)))
}

func mustFilter(b *testing.B) []byte {
	f, err := SeccompFilter()
	if err != nil {
		b.Fatal(err)
	}
	return f
}
