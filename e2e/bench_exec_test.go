package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/sandbox"
)

// BenchmarkSandboxExecCLI measures `kusaw sandbox exec -- true` (no factory:
// the current folder writable, network none) against the same bwrap command
// line run directly (the plan kusaw builds, started without kusaw) and
// against bare true, interleaved so load hits all three alike. It reports
// median ratios; DESIGN §12's target is exec/bwrap ≤ 1.5.
//
//	go test -run '^$' -bench SandboxExecCLI -benchtime 60x ./e2e/
func BenchmarkSandboxExecCLI(b *testing.B) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatal("bwrap is not installed (CI must have it)")
		}
		b.Skip("bwrap is not installed")
	}
	dir := b.TempDir()
	secrets := b.TempDir()
	tmp := b.TempDir()
	in, err := factory.DefaultExecInput(dir, tmp)
	if err != nil {
		b.Fatal(err)
	}
	in.HiddenPaths = []string{secrets}
	env := append(os.Environ(), "KUSAW_SECRETS_DIR="+secrets)

	direct := func() time.Duration {
		p, err := sandbox.BuildPlan(in)
		if err != nil {
			b.Fatal(err)
		}
		cmd, err := sandbox.Command(context.Background(), p, []string{"/bin/true"})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bwrap: %v %s", err, out)
		}
		d := time.Since(t0)
		p.Cleanup()
		return d
	}
	viaKusaw := func() time.Duration {
		cmd := exec.Command(kusawBin, "sandbox", "exec", "--", "/bin/true")
		cmd.Dir, cmd.Env = dir, env
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kusaw sandbox exec: %v %s", err, out)
		}
		return time.Since(t0)
	}
	bare := func() time.Duration {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var k, w, t []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k = append(k, viaKusaw())
		w = append(w, direct())
		t = append(t, bare())
	}
	b.StopTimer()
	mk, mw, mt := median(k), median(w), median(t)
	b.ReportMetric(float64(mk.Microseconds())/1000, "exec-ms")
	b.ReportMetric(float64(mw.Microseconds())/1000, "bwrap-ms")
	b.ReportMetric(float64(mt.Microseconds())/1000, "true-ms")
	b.ReportMetric(float64(mk)/float64(mw), "exec/bwrap")
	b.ReportMetric(float64(mw)/float64(mt), "bwrap/true")
	fmt.Fprintf(os.Stderr, "sandbox exec -- true: median %v; same bwrap argv directly %v; bare true %v; ratio %.2f (target <= 1.5)\n", mk, mw, mt, float64(mk)/float64(mw))
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
