package attempt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
)

func TestCrossedLimit(t *testing.T) {
	cost := func(c float64) *float64 { return &c }
	l := &config.Limits{CostUSD: 1, Tokens: 1000, Turns: 3, Duration: time.Minute}
	tests := []struct {
		name    string
		u       *record.Usage
		elapsed time.Duration
		want    string
	}{
		{"nothing reported", nil, 0, ""},
		{"at every limit: allowed", &record.Usage{InputTokens: 900, OutputTokens: 100, CostUSD: cost(1), Turns: 3}, time.Minute, ""},
		{"cost over", &record.Usage{CostUSD: cost(1.01)}, 0, "cost_usd"},
		{"cache tokens count", &record.Usage{InputTokens: 10, CacheReadTokens: 991}, 0, "tokens"},
		{"turns over", &record.Usage{Turns: 4}, 0, "turns"},
		{"duration over", nil, time.Minute + time.Second, "duration"},
		{"cost first", &record.Usage{CostUSD: cost(2), InputTokens: 5000, Turns: 9}, time.Hour, "cost_usd"},
		{"no cost reported: cost is not crossed", &record.Usage{InputTokens: 10}, 0, ""},
	}
	for _, tc := range tests {
		le := CrossedLimit("step", l, tc.u, tc.elapsed)
		got := ""
		if le != nil {
			got = le.Name
		}
		if got != tc.want {
			t.Errorf("%s: crossed %q, want %q", tc.name, got, tc.want)
		}
	}
	if le := CrossedLimit("pipeline", nil, &record.Usage{InputTokens: 1 << 40}, time.Hour); le != nil {
		t.Errorf("no limits crossed %v", le)
	}
	le := CrossedLimit("pipeline", l, &record.Usage{Turns: 4}, 0)
	if le.Error() != "the pipeline's limits.turns (3) was reached: 4 used" {
		t.Errorf("message %q", le.Error())
	}
}

// The watch sums the processes of one attempt, stops all of them once,
// and a result starts the exit grace after which only that process stops.
func TestLimitAndResultWatch(t *testing.T) {
	ctx, stop := context.WithCancelCause(context.Background())
	hits := 0
	w := newLimitWatch(&config.Limits{Tokens: 100}, stop, func(*LimitError) { hits++ })
	defer w.close()
	w.update(0, &record.Usage{InputTokens: 60})
	w.update(1, &record.Usage{InputTokens: 40})
	if w.reached() != nil || ctx.Err() != nil {
		t.Fatal("100 tokens of 100 stopped the attempt")
	}
	w.update(0, &record.Usage{InputTokens: 61}) // process 0's running total grew
	w.update(1, &record.Usage{InputTokens: 500})
	var le *LimitError
	if !errors.As(context.Cause(ctx), &le) || le.Name != "tokens" || hits != 1 {
		t.Fatalf("cause %v, hits %d", context.Cause(ctx), hits)
	}

	pctx, pstop := context.WithCancelCause(context.Background())
	rw := &resultWatch{i: 0, limits: newLimitWatch(nil, pstop, nil), grace: 20 * time.Millisecond, stop: pstop}
	rw.event(providers.Event{Type: providers.EventText})
	time.Sleep(50 * time.Millisecond)
	if pctx.Err() != nil {
		t.Fatal("stopped without a result")
	}
	rw.event(providers.Event{Type: providers.EventResult})
	select {
	case <-pctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not stopped after the exit grace")
	}
	if !errors.Is(context.Cause(pctx), errAfterResult) {
		t.Fatalf("cause %v", context.Cause(pctx))
	}
	// A process that exits in time is never stopped.
	qctx, qstop := context.WithCancelCause(context.Background())
	q := &resultWatch{limits: nil, grace: 20 * time.Millisecond, stop: qstop}
	q.event(providers.Event{Type: providers.EventResult})
	q.finish()
	time.Sleep(60 * time.Millisecond)
	if qctx.Err() != nil {
		t.Fatal("stopped after it had exited")
	}
}

// A duration limit stops the attempt on its own timer.
func TestLimitWatchDuration(t *testing.T) {
	ctx, stop := context.WithCancelCause(context.Background())
	w := newLimitWatch(&config.Limits{Duration: 30 * time.Millisecond}, stop, func(*LimitError) {})
	defer w.close()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the duration limit never fired")
	}
	if w.reached() == nil || w.reached().Name != "duration" {
		t.Fatalf("reached %v", w.reached())
	}
}
