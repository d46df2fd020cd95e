package record

import (
	"errors"
	"fmt"
	"time"
)

// Approval gates (docs/pipelines.md): a step with gate: makes its run wait
// in state waiting until kusaw approve or kusaw reject (or the API) decides.

// GateWait is the gate a run waits at, in run.json while it waits.
type GateWait struct {
	Step      string     `json:"step"`
	Message   string     `json:"message"`
	Approvers []string   `json:"approvers,omitempty"`
	Since     time.Time  `json:"since"`
	Deadline  *time.Time `json:"deadline,omitempty"` // past it the gate rejects (gate_timeout)
	// File names the decision's file in the run's folder (GateFile).
	File string `json:"file"`
}

// GateDecision is one decision on a gate: who, when, and for a rejection
// why. By is the local user's name, or "token:NAME" for an API token.
type GateDecision struct {
	Step     string    `json:"step"`
	Approve  bool      `json:"approve"`
	By       string    `json:"by"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
	TimedOut bool      `json:"timed_out,omitempty"`
}

// GateFile is the file in a run's folder that carries the decision on the
// gate of a step at position i of the run's steps to the run's owner. It is
// never removed: the first decision is the only one.
func GateFile(step string, i int) string { return fmt.Sprintf("gate-%s-%d.json", step, i) }

// Errors of a gate decision.
var (
	ErrNotWaiting  = errors.New("run is not waiting at a gate")
	ErrNotApprover = errors.New("not one of the gate's approvers")
	ErrDecided     = errors.New("the gate is already decided")
)

// Event types of gates.
const (
	EvGateWaiting  = "gate.waiting"
	EvGateApproved = "gate.approved"
	EvGateRejected = "gate.rejected"

	// Notifications: one line per try of a webhook.
	EvNotifyDelivered = "notify.delivered"
	EvNotifyFailed    = "notify.failed"
)
