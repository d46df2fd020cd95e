package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Claim is the value of an attempt's claim: who runs it. The sequence the
// claim was stored at in its pool's claims stream is the attempt's
// fencing token: every message a worker sends about the attempt carries
// it, and serve accepts a result only while it is still the claim's.
type Claim struct {
	Worker  string    `json:"worker"`
	Attempt string    `json:"attempt"`
	At      time.Time `json:"at"`
}

// ErrClaimed is returned when another worker holds the attempt.
var ErrClaimed = errors.New("the attempt is claimed already")

// Claim takes an attempt of pool for worker and returns the fencing
// token. The stream takes one message per attempt: a claim held is never
// replaced, by its holder or anyone else, until serve revokes it.
func (h *Handles) Claim(ctx context.Context, pool, attemptID, worker string) (uint64, error) {
	b, _ := json.Marshal(Claim{Worker: worker, Attempt: attemptID, At: time.Now().UTC()})
	ack, err := h.JS.PublishMsg(ctx, &nats.Msg{Subject: claimSubject(pool, attemptID), Data: b}, jetstream.WithExpectLastSequencePerSubject(0))
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, ErrClaimed
	}
	if err != nil {
		return 0, fmt.Errorf("claim of %s in pool %s: %w", attemptID, pool, err)
	}
	return ack.Sequence, nil
}

// Holder reads the attempt's current claim and its token; token 0 when
// nobody holds it.
func (h *Handles) Holder(ctx context.Context, pool, attemptID string) (Claim, uint64, error) {
	b, seq, err := readMsg(ctx, h.JS.Conn(), h.leader, ClaimsStream(pool), claimSubject(pool, attemptID))
	if errors.Is(err, ErrNoObject) {
		return Claim{}, 0, nil
	}
	if err != nil {
		return Claim{}, 0, fmt.Errorf("claim of %s in pool %s: %w", attemptID, pool, err)
	}
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return Claim{}, 0, fmt.Errorf("claim of %s: %v", attemptID, err)
	}
	return c, seq, nil
}

// Fenced reports whether a message carrying token from worker must be
// refused: the claim moved on (a new token) or names someone else.
func (h *Handles) Fenced(ctx context.Context, pool, attemptID, worker string, token uint64) bool {
	c, cur, err := h.Holder(ctx, pool, attemptID)
	return err != nil || cur == 0 || cur != token || c.Worker != worker
}

// Revoke ends a claim (serve, when its worker is lost): the next claim
// gets a new, higher token, so the lost worker's messages are fenced.
func (h *Handles) Revoke(ctx context.Context, pool, attemptID string) error {
	return h.purge(ctx, ClaimsStream(pool), claimSubject(pool, attemptID), 0)
}

// RevokeToken ends the claim only if token is still its token: a claim
// made since stays.
func (h *Handles) RevokeToken(ctx context.Context, pool, attemptID string, token uint64) error {
	return h.purge(ctx, ClaimsStream(pool), claimSubject(pool, attemptID), token+1)
}
