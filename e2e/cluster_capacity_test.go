package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// runningOnWorkers is the sum of the attempts the workers report running.
func (r *clusterRig) runningOnWorkers() int {
	ws, err := r.sp.client.Workers(context.Background())
	if err != nil {
		return -1
	}
	n := 0
	for _, w := range ws {
		n += w.Running
	}
	return n
}

// serve.max_parallel bounds serve's own attempts, not the workers': with
// max_parallel 2, three workers of two slots each run six attempts at
// once. serve.cluster.max_running bounds those on workers: with 4, the
// same workers never run more than 4.
func TestClusterCapacityAddsUp(t *testing.T) {
	need(t, "git")
	for _, maxRunning := range []int{0, 4} {
		yaml := strings.Replace(clusterYAML(`"off"`, "4", "15s"), "max_parallel: 12", "max_parallel: 2", 1)
		want := 6
		if maxRunning > 0 {
			yaml = strings.Replace(yaml, "lost_after: 15s}", "lost_after: 15s, max_running: 4}", 1)
			want = maxRunning
		}
		r := startClusterServe(t, yaml)
		for _, n := range []string{"a", "b", "c"} {
			r.startWorker(t, n) // --max-parallel 2
		}
		r.waitWorkers(t, 3)
		ids := r.submit(t, 6)
		most := 0
		waitFor(t, "the workers to run their attempts", 60*time.Second, func() bool {
			n := r.runningOnWorkers()
			most = max(most, n)
			return n >= want
		})
		// Sampled until the runs end: never above the bound.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 40; i++ {
				most = max(most, r.runningOnWorkers())
				time.Sleep(100 * time.Millisecond)
			}
		}()
		<-done
		r.checkRuns(t, ids)
		if most != want {
			t.Errorf("max_running %d: at most %d attempts ran on the workers at once, want %d", maxRunning, most, want)
		}
	}
}
