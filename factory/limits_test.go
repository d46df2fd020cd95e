package factory

import (
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// A pipeline's limits.duration stops the attempt running when it passes
// (its deadline travels in the spec, so a worker stops it too), not only
// between steps: the run ends limit_reached long before the step's sleep.
func TestPipelineDurationStopsRunningAttempt(t *testing.T) {
	start := time.Now()
	r, evs, _ := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default:
    steps: [nap]
    limits: {duration: 1s}
steps:
  nap: {run: [sleep, "60"]}
`)
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the run took %s: the deadline did not stop the attempt", took)
	}
	if r.Record.State != status.RunFailed || r.Record.Reason != status.ReasonLimitReached {
		t.Fatalf("run %s %s: %s", r.Record.State, r.Record.Reason, r.Record.Message)
	}
	hit := eventsOf(evs, record.EvLimitReached)
	if len(hit) == 0 || hit[0].Data["scope"] != "pipeline" || hit[0].Data["limit"] != "duration" {
		t.Fatalf("limit events %+v", hit)
	}
}
