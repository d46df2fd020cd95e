package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// runClient is what kusaw run talks to, whether kusaw serve is up or not
// (Tailscale's CLI and its local client): serve through its socket, or an
// engine in this process. kusaw run's progress, signals, refusal summary
// and exit code are its own and the same either way; a client only starts
// the run, passes its events on and hands back its records.
type runClient interface {
	// Start makes the run; an unknown pipeline or a refused parameter is
	// a usage error.
	Start(pipeline string, params map[string]string) error
	// Wait runs or follows the run to its end, passing each of its events
	// once to the function the client was made with.
	Wait() error
	// Cancel asks the run to stop gracefully (the first signal); it may
	// come before Start has returned.
	Cancel()
	// Result is the ended run's record and all its attempts: the
	// pipeline's and its helpers'.
	Result() (*record.RunRecord, []*record.AttemptRecord, error)
	Close()
}

// runClient is serve's when it is up, else an engine here (KUSAW_NO_SERVE=1
// forces the engine). onEvent gets every event of the run.
func (a *app) runClient(f *config.Factory, killGrace time.Duration, onEvent func(record.Event)) (runClient, error) {
	c, err := a.serveClient(f.StateDir)
	if err != nil {
		return nil, err
	}
	if c != nil {
		return &serveRun{c: c, onEvent: onEvent}, nil
	}
	e, err := factory.New(f, factory.Options{KillGrace: killGrace, OnEvent: onEvent})
	if e == nil {
		return nil, exitf(status.ExitInternal, "%v", err)
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "kusaw: warning: recovering interrupted runs: %v\n", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &localRun{a: a, e: e, ctx: ctx, cancel: cancel}, nil
}

// localRun runs the pipeline with an engine in this process.
type localRun struct {
	a      *app
	e      *factory.Engine
	ctx    context.Context
	cancel context.CancelFunc
	run    *factory.Run
}

func (l *localRun) Start(pipeline string, params map[string]string) error {
	r, err := l.e.PrepareWithParams(pipeline, params)
	if errors.Is(err, record.ErrUnknownPipeline) || errors.Is(err, record.ErrBadParams) {
		return exitf(status.ExitUsage, "%s", strings.TrimPrefix(err.Error(), record.ErrUnknownPipeline.Error()+": "))
	}
	if err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	l.run = r
	return nil
}

func (l *localRun) Wait() error {
	l.e.Execute(l.ctx, l.run)
	return nil
}

func (l *localRun) Cancel() { l.cancel() }

func (l *localRun) Result() (*record.RunRecord, []*record.AttemptRecord, error) {
	// Webhooks still being retried get a short while; kusaw serve
	// retries them for up to ten minutes.
	if !l.e.WaitNotifications(5 * time.Second) {
		fmt.Fprintln(l.a.stderr, "kusaw: notifications still failing after 5s are given up (run kusaw serve to retry them for 10 minutes)")
	}
	atts, _ := l.e.State.AllAttempts(l.run.Record)
	return l.run.Record, atts, nil
}

func (l *localRun) Close() {
	l.cancel()
	_ = l.e.Close()
}

// serveRun submits the run to kusaw serve and follows it there.
type serveRun struct {
	c       *client.Client
	onEvent func(record.Event)

	mu       sync.Mutex
	id       string
	canceled bool // Cancel came before the run had an id
}

func (s *serveRun) Start(pipeline string, params map[string]string) error {
	rec, err := s.c.Submit(context.Background(), pipeline, params)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && (ae.Code == "bad_params" || ae.Code == "unknown_pipeline") {
			return exitf(status.ExitUsage, "%s", ae.Message)
		}
		return exitf(status.ExitServeUnavailable, "kusaw serve refused the run: %v", err)
	}
	s.mu.Lock()
	s.id = rec.ID
	canceled := s.canceled
	s.mu.Unlock()
	if canceled {
		s.Cancel()
	}
	return nil
}

func (s *serveRun) Wait() error {
	// Events already passed on are not passed again after a reconnect.
	seen := map[string]bool{}
	var err error
	for tries := 0; tries < 5; tries++ {
		_, err = s.c.Follow(context.Background(), s.id, func(ev record.Event) {
			k := fmt.Sprintf("%s/%d/%d", ev.Step, ev.Attempt, ev.Seq)
			if seen[k] {
				return
			}
			seen[k] = true
			s.onEvent(normalizeEvent(ev))
		})
		if err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return exitf(status.ExitServeUnavailable, "lost kusaw serve while following run %s: %v (see: kusaw show %s)", s.id, err, s.id)
}

func (s *serveRun) Cancel() {
	s.mu.Lock()
	id := s.id
	s.canceled = id == ""
	s.mu.Unlock()
	if id != "" {
		_, _ = s.c.CancelCtx(context.Background(), id)
	}
}

func (s *serveRun) Result() (*record.RunRecord, []*record.AttemptRecord, error) {
	d, err := s.c.Detail(context.Background(), s.id)
	if err != nil {
		return nil, nil, exitf(status.ExitServeUnavailable, "%v", err)
	}
	return d.Run, append(append([]*record.AttemptRecord{}, d.Attempts...), d.Helpers...), nil
}

func (s *serveRun) Close() {}

// normalizeEvent turns JSON numbers that were ints in-process back into
// ints, so the progress lines read the same either way.
func normalizeEvent(ev record.Event) record.Event {
	for _, k := range []string{"of", "attempts", "attempt", "exit_code", "port", "pid", "duration_ms"} {
		if n, ok := ev.Int(k); ok {
			ev.Data[k] = n
		}
	}
	return ev
}

// parseParams reads --param NAME=VALUE flags.
func parseParams(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: --param %q is not NAME=VALUE", record.ErrBadParams, f)
		}
		m[k] = v
	}
	return m, nil
}
