package factory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// Approval gates: before a step with gate: the run waits in state waiting
// until a decision file appears in its folder (written by DecideGate, from
// kusaw approve/reject or serve's API) or the gate's timeout passes.

// DecideGate records a decision on the gate a run waits at. step "" means
// the gate it waits at now. The run's owner reads the decision within its
// poll interval.
func (s *State) DecideGate(id string, d record.GateDecision) (*record.RunRecord, error) {
	r, err := s.LoadRun(id)
	if err != nil {
		return nil, err
	}
	if r.State != status.RunWaiting || r.Gate == nil {
		return r, fmt.Errorf("%w: run %s is %s", record.ErrNotWaiting, r.ID, r.State)
	}
	if d.Step == "" {
		d.Step = r.Gate.Step
	}
	if d.Step != r.Gate.Step {
		return r, fmt.Errorf("%w: run %s waits at the gate of step %s, not %s", record.ErrNotWaiting, r.ID, r.Gate.Step, d.Step)
	}
	if len(r.Gate.Approvers) > 0 && !slices.Contains(r.Gate.Approvers, d.By) {
		return r, fmt.Errorf("%w: %s may not decide the gate of step %s (approvers: %s)", record.ErrNotApprover, d.By, d.Step, strings.Join(r.Gate.Approvers, ", "))
	}
	if d.At.IsZero() {
		d.At = time.Now().UTC()
	}
	if !record.ValidName(r.Gate.File) || !strings.HasPrefix(r.Gate.File, "gate-") {
		return r, fmt.Errorf("%w: run %s names no decision file", record.ErrNotWaiting, r.ID)
	}
	if err := writeDecision(filepath.Join(s.RunDir(r.ID), r.Gate.File), d); err != nil {
		if errors.Is(err, os.ErrExist) {
			return r, fmt.Errorf("%w: the gate of step %s in run %s", record.ErrDecided, d.Step, r.ID)
		}
		return r, err
	}
	return r, nil
}

// writeDecision takes the decision on a gate: O_EXCL, and the file stays,
// so the first decision (a person's, or the run's own timeout) is final at
// once, whatever the run's owner is doing; a second one finds the file.
// The content is written to a temporary file first, so a reader never sees
// half of it.
func writeDecision(path string, d record.GateDecision) error {
	b, _ := json.Marshal(d)
	f, err := os.CreateTemp(filepath.Dir(path), ".decision-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// link(2) fails if path exists: an atomic create-if-absent with the
	// whole content.
	return os.Link(tmp, path)
}

// waitGate makes the run wait at step i's gate until it is decided.
func (e *Engine) waitGate(ctx context.Context, r *Run, i int) itemEnd {
	s := r.steps[i]
	g := s.Gate
	if prev := r.Record.Steps[i].Gate; prev != nil && prev.Approve {
		return itemEnd{ok: true} // approved before a restart
	}
	file := record.GateFile(s.ID, i)
	path := filepath.Join(r.Dir, file)
	wait := &record.GateWait{Step: s.ID, Message: g.Message, Approvers: g.Approvers, Since: time.Now().UTC(), File: file}
	if prev := r.Record.Gate; prev != nil && prev.Step == s.ID {
		wait.Since = prev.Since // a resumed run keeps the gate's clock
	}
	if g.Timeout > 0 {
		d := wait.Since.Add(g.Timeout)
		wait.Deadline = &d
	}
	r.mu.Lock()
	r.Record.State, r.Record.Gate = status.RunWaiting, wait
	r.mu.Unlock()
	r.save()
	data := map[string]any{"step": s.ID, "message": g.Message, "approve": "kusaw approve " + r.ID() + " " + s.ID,
		"reject": "kusaw reject " + r.ID() + " " + s.ID + " --reason TEXT"}
	if len(g.Approvers) > 0 {
		data["approvers"] = g.Approvers
	}
	if wait.Deadline != nil {
		data["deadline"] = wait.Deadline.Format(time.RFC3339)
	}
	r.events.Emit(record.EvGateWaiting, data)
	e.notify(r, "run.waiting", "")
	t := time.NewTicker(e.opts.CancelPoll)
	defer t.Stop()
	for {
		d, ok := readDecision(path)
		switch decideGate(ok, wait.Deadline, time.Now()) {
		case gateDecided:
			return r.gateDecided(i, d)
		case gateTimeout:
			to := record.GateDecision{Step: s.ID, By: "kusaw (timeout)", At: time.Now().UTC(), TimedOut: true,
				Reason: fmt.Sprintf("no decision within %s", g.Timeout)}
			// The timeout is a decision too: it is taken like a person's,
			// and loses to one taken just before it.
			if err := writeDecision(path, to); err == nil {
				return r.gateDecided(i, to)
			}
			if d, ok := readDecision(path); ok {
				return r.gateDecided(i, d)
			}
		}
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.Record.State = status.RunRunning
			r.mu.Unlock()
			return itemEnd{canceled: true}
		case <-t.C:
		}
	}
}

// gateDecided records a decision in run.json and the run's events.
func (r *Run) gateDecided(i int, d record.GateDecision) itemEnd {
	r.mu.Lock()
	r.Record.State, r.Record.Gate = status.RunRunning, nil
	r.Record.Steps[i].Gate = &d
	r.mu.Unlock()
	r.save()
	data := map[string]any{"step": d.Step, "by": d.By, "at": d.At.Format(time.RFC3339Nano)}
	if d.Reason != "" {
		data["reason"] = d.Reason
	}
	if d.Approve {
		r.events.Emit(record.EvGateApproved, data)
		return itemEnd{ok: true}
	}
	reason := status.ReasonGateRejected
	msg := fmt.Sprintf("the gate before step %s was rejected by %s", d.Step, d.By)
	if d.TimedOut {
		reason, msg = status.ReasonGateTimeout, fmt.Sprintf("the gate before step %s was not decided in time", d.Step)
		data["timed_out"] = true
	}
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	r.events.Emit(record.EvGateRejected, data)
	return itemEnd{reason: reason, msg: msg}
}

func readDecision(path string) (record.GateDecision, bool) {
	var d record.GateDecision
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &d) != nil {
		return d, false
	}
	return d, true
}
