package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// What a NATS cluster that still settles answers is waited out; what
// lasts (a placement no server can take) fails at once. CI saw serve fail
// at start with "no suitable peers for placement, peer offline" from a
// three-server cluster whose routes had just reconnected.
func TestLeaderlessIsWhatSettles(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{ErrorCode: jsTemporarilyUnavailable, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("stream X: %w", &jetstream.APIError{ErrorCode: jsNoPeers, Description: "no suitable peers for placement, peer offline"}), true},
		{context.DeadlineExceeded, true},
		{&jetstream.APIError{ErrorCode: jsNoPeers, Description: "no suitable peers for placement, insufficient storage"}, false},
		{&jetstream.APIError{ErrorCode: 10058, Description: "stream name already in use with a different configuration"}, false},
		{errors.New("nats: permissions violation"), false},
	} {
		if got := leaderless(c.err); got != c.want {
			t.Errorf("leaderless(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
