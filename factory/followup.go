package factory

import (
	"fmt"

	"github.com/kusaw/kusaw/record"
)

// RunRequest is a run to prepare with what serve's intake knows of it: the
// forge event or schedule that started it, and the run it continues.
type RunRequest struct {
	Pipeline string
	Params   map[string]string
	Trigger  *record.Trigger
	// Continues names a finished run whose run branches this run starts
	// from instead of each repo's base (a follow-up after a review): its
	// steps start from that branch's head, and delivery pushes to the
	// same remote branch and updates the same pull request, never forcing.
	Continues string
}

// PrepareRequest creates a queued run for req.
func (e *Engine) PrepareRequest(req RunRequest) (*Run, error) {
	var prev *record.RunRecord
	if req.Continues != "" {
		p, err := e.State.LoadRun(req.Continues)
		if err != nil {
			return nil, fmt.Errorf("cannot continue run %s: %v", req.Continues, err)
		}
		if !p.State.Final() {
			return nil, fmt.Errorf("cannot continue run %s while it is %s: wait for it to end", p.ID, p.State)
		}
		prev = p
	}
	return e.prepareWithParams(req.Pipeline, req.Params, func(rec *record.RunRecord) {
		rec.Trigger = req.Trigger
		if prev != nil {
			rec.Continues, rec.Thread = prev.ID, prev.ID
			if prev.Thread != "" {
				rec.Thread = prev.Thread
			}
		}
	})
}

// threadID is the run whose name a run's delivery uses: the first run of
// its chain of follow-ups, so that each follow-up pushes to the same
// branch and pull request.
func threadID(rec *record.RunRecord) string {
	if rec.Thread != "" {
		return rec.Thread
	}
	return rec.ID
}

// continuedBases are where a follow-up's run branches start: the branches
// of the run it continues, by repo (none for another run).
func (e *Engine) continuedBases(rec *record.RunRecord) (map[string]string, error) {
	if rec.Continues == "" {
		return nil, nil
	}
	prev, err := e.State.LoadRun(rec.Continues)
	if err != nil {
		return nil, fmt.Errorf("cannot continue run %s: %v", rec.Continues, err)
	}
	bases := map[string]string{}
	for _, rr := range prev.Repos {
		bases[rr.Name] = "refs/heads/" + rr.Branch
	}
	return bases, nil
}
