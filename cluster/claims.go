package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Claim is the value of claims.<attempt>: who runs it. The KV revision
// the claim was created at is the attempt's fencing token: every message a
// worker sends about the attempt carries it, and serve accepts a result
// only while it is still the claim's revision.
type Claim struct {
	Worker  string    `json:"worker"`
	Attempt string    `json:"attempt"`
	At      time.Time `json:"at"`
}

// ErrClaimed is returned when another worker holds the attempt.
var ErrClaimed = errors.New("the attempt is claimed already")

// Claim takes an attempt for worker and returns the fencing token.
func (h *Handles) Claim(ctx context.Context, attemptID, worker string) (uint64, error) {
	b, _ := json.Marshal(Claim{Worker: worker, Attempt: attemptID, At: time.Now().UTC()})
	rev, err := h.Claims.Create(ctx, ClaimKey(attemptID), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrClaimed
	}
	return rev, err
}

// Holder reads the attempt's current claim and its token; token 0 when
// nobody holds it.
func (h *Handles) Holder(ctx context.Context, attemptID string) (Claim, uint64, error) {
	e, err := h.Claims.Get(ctx, ClaimKey(attemptID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Claim{}, 0, nil
	}
	if err != nil {
		return Claim{}, 0, err
	}
	var c Claim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return Claim{}, 0, fmt.Errorf("claim of %s: %v", attemptID, err)
	}
	return c, e.Revision(), nil
}

// Fenced reports whether a message carrying token from worker must be
// refused: the claim moved on (a new revision) or names someone else.
func (h *Handles) Fenced(ctx context.Context, attemptID, worker string, token uint64) bool {
	c, cur, err := h.Holder(ctx, attemptID)
	return err != nil || cur == 0 || cur != token || c.Worker != worker
}

// Revoke ends a claim (serve, when its worker is lost): the next claim
// gets a new, higher token, so the lost worker's messages are fenced.
func (h *Handles) Revoke(ctx context.Context, attemptID string) error {
	err := h.Claims.Purge(ctx, ClaimKey(attemptID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}
