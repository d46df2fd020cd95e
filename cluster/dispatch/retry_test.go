package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// What a leader election or an outage gives is tried again; anything
// else ends the attempt at once, and so does the attempt's end.
func TestUntilNATS(t *testing.T) {
	for _, tc := range []struct {
		err   error
		tries int
	}{
		{jetstream.ErrNoStreamResponse, 3},
		{fmt.Errorf("claim of x: %w", nats.ErrTimeout), 3},
		{context.DeadlineExceeded, 3},
		{nats.ErrNoResponders, 3},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, 3},
		{errors.New("permissions violation"), 1},
		{&jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}, 1},
	} {
		n := 0
		err := untilNATS(context.Background(), func() error {
			n++
			if n < 3 {
				return tc.err
			}
			return nil
		})
		if n != tc.tries || (tc.tries == 3) != (err == nil) {
			t.Errorf("%v: %d tries, %v", tc.err, n, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	if err := untilNATS(ctx, func() error { n++; return nats.ErrTimeout }); err == nil || n != 1 {
		t.Errorf("an ended attempt: %d tries, %v", n, err)
	}
}
