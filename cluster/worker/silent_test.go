package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A stream that does not answer (a leader election) is named as NATS's,
// not blamed on serve; a request serve does not answer is serve's.
func TestWhoIsSilent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("report: %w", jetstream.ErrNoStreamResponse), "NATS stream"},
		{jetstream.ErrJetStreamNotEnabled, "NATS stream"},
		{nats.ErrNoResponders, "serve does not answer"},
		{context.DeadlineExceeded, "serve does not answer"},
	} {
		if got := whoIsSilent(tc.err); !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want %q", tc.err, got, tc.want)
		}
	}
}
