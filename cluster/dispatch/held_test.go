package dispatch

import (
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
)

// Attacker's side: a worker enrolled for pool default claims, in its own
// heartbeat, to offer pool release and to hold a commit the release
// workers lack. Serve bundles a release attempt's code against what the
// pool's workers hold: mallory's claim does not count, so the bundle is
// not cut short of what a real release worker needs. The twin: a release
// worker's heartbeat counts.
func TestHeldCountsOnlyAllowedWorkers(t *testing.T) {
	dir := t.TempDir()
	reg := cluster.OpenRegistry(dir)
	reg.Add(cluster.Enrolled{Name: "mallory", NKey: "U1", XKey: "X1", Allowed: []string{"default"}})
	reg.Add(cluster.Enrolled{Name: "rel", NKey: "U2", XKey: "X2", Allowed: []string{"release"}})
	d := &Dispatcher{o: Options{Registry: reg, LostAfter: time.Minute}, seen: map[string]time.Time{}, hb: map[string]cluster.Heartbeat{}}
	d.seen["mallory"] = time.Now()
	d.hb["mallory"] = cluster.Heartbeat{Name: "mallory", Pools: []string{"release"}, Have: map[string][]string{"app": {"c0ffee"}}}
	if got := d.held("release", "app"); len(got) != 0 {
		t.Fatalf("mallory's heartbeat counted for pool release: %v", got)
	}
	d.seen["rel"] = time.Now()
	d.hb["rel"] = cluster.Heartbeat{Name: "rel", Pools: []string{"release"}, Have: map[string][]string{"app": {"abc123"}}}
	if got := d.held("release", "app"); len(got) != 1 || got[0] != "abc123" {
		t.Fatalf("the release worker's heartbeat: %v", got)
	}
}
