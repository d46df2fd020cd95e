package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/worker"
	"github.com/kusaw/kusaw/internal/daemon"
	"github.com/kusaw/kusaw/status"
)

// runWorker is kusaw worker after kusaw read its command line and
// settings (cmd/kusaw/cluster.go).
func runWorker(spec daemon.Spec) error {
	o := spec.Worker
	stateDir, drainFor := o.StateDir, o.DrainTimeout
	// SIGTERM or SIGINT drains (no new attempts; the running ones
	// finish within the drain timeout, then go back to serve); a
	// second one, or SIGQUIT, hands them back and stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	var running atomic.Pointer[worker.Worker]
	go func() {
		n := 0
		for sig := range sigs {
			n++
			wk := running.Load()
			if wk == nil || n > 1 || sig == syscall.SIGQUIT {
				if wk != nil {
					fmt.Fprintf(os.Stderr, "kusaw worker %s: %v: handing running attempts back to serve and stopping now\n", wk.Name(), sig)
				}
				cancel()
				continue
			}
			fmt.Fprintf(os.Stderr, "kusaw worker %s: %v: draining (no new attempts; running ones may finish within %s; signal again or SIGQUIT to stop now)\n", wk.Name(), sig, drainFor)
			wk.Drain(sig.String(), drainFor)
		}
	}()
	// --max-parallel and --pool are kept in the state folder: a
	// worker started again without them (a service restart, a
	// start without its token) keeps them.
	kept := worker.LoadSettings(stateDir)
	if o.MaxParallelSet {
		kept.MaxParallel = o.MaxParallel
	}
	if o.PoolsSet {
		kept.Pools = o.Pools
	}
	maxParallel, pools := max(kept.MaxParallel, 1), kept.Pools
	if o.Join != "" {
		id, err := worker.Join(ctx, stateDir, o.Join, o.Name, spec.Version, pools)
		if err != nil {
			return exitf(status.ExitNotEnrolled, "%v", err)
		}
		fmt.Fprintf(os.Stderr, "kusaw worker %s: enrolled with serve at %s\n", id.Name, id.Server)
	}
	w, err := worker.New(ctx, worker.Options{StateDir: stateDir, Pools: pools, MaxParallel: maxParallel, Version: spec.Version, Kusaw: spec.Kusaw,
		DrainTimeout: drainFor,
		Logf:         func(format string, args ...any) { fmt.Fprintf(os.Stderr, "kusaw worker: "+format+"\n", args...) }})
	if err != nil {
		if errors.Is(err, cluster.ErrNotEnrolled) || errors.Is(err, worker.ErrPoolNotAllowed) || errors.Is(err, cluster.ErrNotJoined) {
			return exitf(status.ExitNotEnrolled, "%v", err)
		}
		return exitf(status.ExitServeUnavailable, "%v", err)
	}
	defer w.Close()
	if err := worker.SaveSettings(stateDir, kept); err != nil {
		fmt.Fprintf(os.Stderr, "kusaw worker %s: cannot keep its settings in %s: %v\n", w.Name(), stateDir, err)
	}
	running.Store(w)
	fmt.Fprintf(os.Stderr, "kusaw worker %s: ready (pools %s, %d at once)\n", w.Name(), strings.Join(w.Pools(), ","), max(1, maxParallel))
	if err := w.Run(ctx); err != nil {
		if errors.Is(err, cluster.ErrNotEnrolled) {
			return exitf(status.ExitNotEnrolled, "%v", err)
		}
		return err
	}
	if w.Draining() {
		fmt.Fprintf(os.Stderr, "kusaw worker %s: drained; stopped\n", w.Name())
	}
	return nil
}
