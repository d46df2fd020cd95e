package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kusaw/kusaw/cluster"
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
	return w.persistFor(what, w.o.TryTimeout, fn)
}

// persistFor is persist with each try bounded by try.
func (w *Worker) persistFor(what string, try time.Duration, fn func(context.Context) error) error {
	deadline := time.Now().Add(reportPatience)
	wait := 250 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), try)
		err := fn(ctx)
		cancel()
		if err == nil || !w.unreachable(err) || time.Now().After(deadline) {
			return err
		}
		w.o.Logf("%s: %s (%v); trying again", what, whoIsSilent(err), err)
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
// own (name.2, name.3): an object is never replaced, and a try cut off
// may have stored one. So does a try whose name another worker of the
// pool took first.
func (w *Worker) put(what, name, path string) (obj, sum string, err error) {
	// A try may take its bound plus a second per MiB: a large artifacts
	// tar on a slow link must not be cut off and sent again for ever.
	bound := w.o.TryTimeout
	if fi, err := os.Stat(path); err == nil {
		bound += time.Duration(fi.Size()>>20) * time.Second
	}
	try := 0
	err = w.persistFor(what, bound, func(c context.Context) error {
		for {
			try++
			obj = name
			if try > 1 {
				obj = fmt.Sprintf("%s.%d", name, try)
			}
			var perr error
			_, sum, perr = w.h.PutFileSum(c, obj, path)
			if !errors.Is(perr, cluster.ErrObjectExists) || try >= 8 {
				return perr
			}
		}
	})
	return obj, sum, err
}

// connLost marks the connection dropped: what runs over it (connected)
// starts again once it is back.
func (w *Worker) connLost() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.lost)
	w.lost = make(chan struct{})
}

// connected runs fn with a context that also ends when the connection to
// serve drops, and runs it again (a few times) when it failed because the
// connection dropped meanwhile: an object being fetched or a request in
// flight when serve restarted is lost with the old connection and would
// otherwise wait for its timeout, or for ever.
func (w *Worker) connected(ctx context.Context, what string, fn func(context.Context) error) error {
	first := time.Now()
	for try := 1; ; try++ {
		w.mu.Lock()
		lost := w.lost
		w.mu.Unlock()
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
				cancel()
			case <-cctx.Done():
			}
		}()
		err := fn(cctx)
		cancel()
		dropped := false
		select {
		case <-lost:
			dropped = true
		default:
		}
		// No responders: serve is back but has not re-attached to the
		// attempt yet (or has not decided to end it: a cancel then stops
		// this through ctx).
		if err != nil && errors.Is(err, nats.ErrNoResponders) && ctx.Err() == nil && time.Since(first) < reportPatience {
			select {
			case <-ctx.Done():
				return err
			case <-w.stopping():
				return err
			case <-time.After(250 * time.Millisecond):
			}
			try--
			continue
		}
		if err == nil || !dropped || ctx.Err() != nil || try >= 5 {
			return err
		}
		w.o.Logf("%s: the connection to serve dropped (%v); trying again when it is back", what, err)
		deadline := time.Now().Add(reportPatience)
		for !w.nc.IsConnected() {
			if time.Now().After(deadline) || ctx.Err() != nil || w.nc.IsClosed() {
				return err
			}
			select {
			case <-ctx.Done():
			case <-w.stopping():
				return err
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// unreachable reports whether err means serve (or its NATS server) could
// not be reached, rather than refusing what was asked.
func (w *Worker) unreachable(err error) bool {
	if w.nc.IsClosed() {
		return false // for good: the server refused the worker's key
	}
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

// whoIsSilent names what does not answer: a JetStream stream (no
// response from it, or JetStream unavailable: a leader election, or the
// NATS servers' trouble) is not serve.
func whoIsSilent(err error) string {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return "the NATS stream does not answer (a leader election, or NATS is down)"
	}
	return "serve does not answer"
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
