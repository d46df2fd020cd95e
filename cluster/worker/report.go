package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// reportPatience is how long a finished attempt's uploads and result wait
// for serve to answer again: a serve killed and restarted meanwhile
// re-attaches to the attempt and takes its report (docs/cluster.md).
const reportPatience = 15 * time.Minute

// persist runs fn until it succeeds, trying again while serve cannot be
// reached, for at most reportPatience or until the worker stops. Any
// other error ends it at once.
func (w *Worker) persist(what string, fn func(context.Context) error) error {
	deadline := time.Now().Add(reportPatience)
	wait := 250 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), w.o.TryTimeout)
		err := fn(ctx)
		cancel()
		if err == nil || !w.unreachable(err) || time.Now().After(deadline) {
			return err
		}
		w.o.Logf("%s: serve does not answer (%v); trying again", what, err)
		select {
		case <-w.stopping():
			return err
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// put uploads a file as the object name, trying again while serve cannot
// be reached, and returns the object's name and the SHA-256 of what it
// stored (the result names both). A try after the first uses a name of its
// own (name.2, name.3): a worker may not purge the chunks a cut-off try
// left, which storing over the same name would have to.
func (w *Worker) put(what, name, path string) (obj, sum string, err error) {
	try := 0
	err = w.persist(what, func(c context.Context) error {
		try++
		obj = name
		if try > 1 {
			obj = fmt.Sprintf("%s.%d", name, try)
		}
		var perr error
		_, sum, perr = w.h.PutFileSum(c, obj, path)
		return perr
	})
	return obj, sum, err
}

// unreachable reports whether err means serve (or its NATS server) could
// not be reached, rather than refusing what was asked.
func (w *Worker) unreachable(err error) bool {
	if !w.nc.IsConnected() {
		return true
	}
	for _, e := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, nats.ErrDisconnected,
		nats.ErrConnectionReconnecting, jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// stopping is closed when the worker stops taking attempts.
func (w *Worker) stopping() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop == nil {
		return nil
	}
	return w.stop.Done()
}
