package factory

import (
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// runLimit is the pipeline limit the run has crossed so far, if any.
func (r *Run) runLimit() *attempt.LimitError {
	if r.limits.Empty() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var elapsed time.Duration
	if r.Record.Started != nil {
		elapsed = time.Since(*r.Record.Started)
	}
	return attempt.CrossedLimit("pipeline", r.limits, r.Record.Usage, elapsed)
}

// limitEnd ends the run on a crossed pipeline limit.
func (r *Run) limitEnd(le *attempt.LimitError, where string) {
	r.events.Emit(record.EvLimitReached, le.Data())
	r.end(status.RunFailed, status.ReasonLimitReached, where+": "+le.Error())
}

// addUsage sums one attempt's usage into its step's and the run's.
func (r *Run) addUsage(step string, u *record.Usage) {
	if u == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Record.Usage = record.Add(r.Record.Usage, u)
	for j := len(r.Record.Steps) - 1; j >= 0; j-- {
		if sr := &r.Record.Steps[j]; sr.ID == step && sr.Started != nil {
			sr.Usage = record.Add(sr.Usage, u)
			return
		}
	}
}
