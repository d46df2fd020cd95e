package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// holdWork keeps a claimed attempt's work message in progress while the
// attempt runs, with a progress acknowledgement every third of AckWait,
// so the queue does not offer it to another worker; the function it
// returns stops that and acknowledges the message, once the attempt has
// been reported. A worker that dies stops acknowledging: serve deletes
// the message when it gives the attempt up (dispatch's dropWork), so it
// is never run again under its old number.
func (w *Worker) holdWork(msg jetstream.Msg) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.o.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() {
		cancel()
		<-done
		_ = msg.Ack()
	}
}
