package e2e

import (
	"context"
	"sort"
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

// mostAtOnce is the most attempts of the runs whose records' started to
// finished overlap; an attempt that finishes the moment another starts
// does not overlap it.
func (r *clusterRig) mostAtOnce(t *testing.T, ids []string) int {
	t.Helper()
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, id := range ids {
		d, err := r.sp.client.Detail(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range d.Attempts {
			if a.Finished == nil {
				t.Fatalf("run %s attempt %s/%d: no finished time in attempt.json", id, a.Step, a.Number)
			}
			edges = append(edges, edge{a.Started, +1}, edge{*a.Finished, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].d < edges[j].d
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.d
		most = max(most, n)
	}
	return most
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
		// The workers' heartbeats say when the bound is reached; they are
		// up to a second old, so the bound itself is checked on the
		// attempts' own records, which lie within serve's slots.
		waitFor(t, "the workers to run their attempts", 60*time.Second, func() bool {
			return r.runningOnWorkers() >= want
		})
		r.checkRuns(t, ids)
		if most := r.mostAtOnce(t, ids); most != want {
			t.Errorf("max_running %d: at most %d attempts ran on the workers at once, want %d", maxRunning, most, want)
		}
	}
}
