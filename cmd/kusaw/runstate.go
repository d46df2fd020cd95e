package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// openState loads the factory file and opens its state directory, which
// also marks runs whose kusaw died as interrupted.
func (a *app) openState() (*factory.State, error) {
	f, err := a.loadFactory()
	if err != nil {
		return nil, err
	}
	record.SetStateDirMode(f.StateDirMode)
	st, err := factory.OpenState(f.StateDir)
	if st == nil {
		return nil, exitf(status.ExitInternal, "%v", err)
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "kusaw: warning: recovering interrupted runs: %v\n", err)
	}
	return st, nil
}

// loadRun maps a missing run to exit 5, an ambiguous id to a usage error.
func loadRun(st RunStore, id string) (*record.RunRecord, error) {
	r, err := st.LoadRun(id)
	if errors.Is(err, record.ErrNoRun) {
		return nil, exitf(status.ExitNotFound, "%v", err)
	}
	if errors.Is(err, record.ErrAmbiguousRun) {
		return nil, exitf(status.ExitUsage, "%v (give more of the id; list runs with: kusaw runs)", err)
	}
	if err != nil {
		return nil, exitf(status.ExitInternal, "%v", err)
	}
	return r, nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

func runDuration(r *record.RunRecord) string {
	if r.Started == nil {
		return "-"
	}
	end := time.Now()
	if r.Finished != nil {
		end = *r.Finished
	}
	return fmtDur(end.Sub(*r.Started))
}

func short(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}
