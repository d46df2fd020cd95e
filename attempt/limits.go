package attempt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
)

// errAfterResult is why kusaw stops an agent that printed its result but
// did not exit within its exit grace: the result decides the attempt.
var errAfterResult = errors.New("the agent printed its result but did not exit")

// LimitError is a crossed limit: of the step (per attempt) or of the
// pipeline (the run).
type LimitError struct {
	Scope string // "step" or "pipeline"
	Name  string // cost_usd, tokens, turns, duration
	Used  string
	Max   string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("the %s's limits.%s (%s) was reached: %s used", e.Scope, e.Name, e.Max, e.Used)
}

func (e *LimitError) Data() map[string]any {
	return map[string]any{"scope": e.Scope, "limit": e.Name, "max": e.Max, "used": e.Used}
}

// CrossedLimit is the first limit u or elapsed goes over (cost, tokens,
// turns, duration); nil when none is. Going over, not reaching: a limit of
// 30 turns allows the 30th.
func CrossedLimit(scope string, l *config.Limits, u *record.Usage, elapsed time.Duration) *LimitError {
	if l.Empty() {
		return nil
	}
	if c, ok := u.Cost(); ok && l.CostUSD > 0 && c > l.CostUSD {
		return &LimitError{scope, "cost_usd", fmt.Sprintf("$%.4f", c), "$" + strconv.FormatFloat(l.CostUSD, 'f', -1, 64)}
	}
	if l.Tokens > 0 && u.Tokens() > l.Tokens {
		return &LimitError{scope, "tokens", strconv.FormatInt(u.Tokens(), 10), strconv.FormatInt(l.Tokens, 10)}
	}
	if u != nil && l.Turns > 0 && u.Turns > l.Turns {
		return &LimitError{scope, "turns", strconv.Itoa(u.Turns), strconv.Itoa(l.Turns)}
	}
	if l.Duration > 0 && elapsed > l.Duration {
		return &LimitError{scope, "duration", elapsed.Round(time.Second).String(), l.Duration.String()}
	}
	return nil
}

// limitWatch keeps the running usage of one attempt's processes and stops
// the attempt (all its processes) when a step limit is crossed.
type limitWatch struct {
	lim   *config.Limits
	stop  context.CancelCauseFunc
	onHit func(*LimitError)

	mu    sync.Mutex
	per   map[int]*record.Usage
	hit   *LimitError
	timer *time.Timer
	until *time.Timer // the pipeline's deadline (until)
}

func newLimitWatch(lim *config.Limits, stop context.CancelCauseFunc, onHit func(*LimitError)) *limitWatch {
	w := &limitWatch{lim: lim, stop: stop, onHit: onHit, per: map[int]*record.Usage{}}
	if !lim.Empty() && lim.Duration > 0 {
		start := time.Now()
		w.timer = time.AfterFunc(lim.Duration, func() {
			w.cross(&LimitError{"step", "duration", time.Since(start).Round(time.Second).String(), lim.Duration.String()})
		})
	}
	return w
}

// update records process i's running usage and checks the sum.
func (w *limitWatch) update(i int, u *record.Usage) {
	if w == nil || w.lim.Empty() || u == nil {
		return
	}
	w.mu.Lock()
	w.per[i] = u
	sum := &record.Usage{}
	for _, pu := range w.per {
		sum.Merge(pu)
	}
	w.mu.Unlock()
	if le := CrossedLimit("step", w.lim, sum, 0); le != nil {
		w.cross(le)
	}
}

func (w *limitWatch) cross(le *LimitError) {
	w.mu.Lock()
	first := w.hit == nil
	if first {
		w.hit = le
	}
	w.mu.Unlock()
	if first {
		w.onHit(le)
		w.stop(le)
	}
}

// reached is the limit crossed, if any.
func (w *limitWatch) reached() *LimitError {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hit
}

// deadline stops the attempt at the pipeline's deadline (its run's start
// plus limits.duration, carried in the spec to wherever it runs).
func (w *limitWatch) deadline(at time.Time) {
	start := time.Now()
	w.until = time.AfterFunc(time.Until(at), func() {
		w.cross(&LimitError{"pipeline", "duration", time.Since(start).Round(time.Second).String() + " by this attempt", "until " + at.UTC().Format(time.RFC3339)})
	})
}

func (w *limitWatch) close() {
	if w != nil && w.timer != nil {
		w.timer.Stop()
	}
	if w != nil && w.until != nil {
		w.until.Stop()
	}
}

// resultWatch acts on one agent process's stream while it runs: usage goes
// to the attempt's limits, and a result starts the exit grace, after which
// the process is stopped (stop with errAfterResult).
type resultWatch struct {
	i      int
	limits *limitWatch
	grace  time.Duration
	stop   context.CancelCauseFunc

	mu    sync.Mutex
	timer *time.Timer
	done  bool
}

func (w *resultWatch) event(ev providers.Event) {
	w.limits.update(w.i, ev.Usage)
	if ev.Type != providers.EventResult {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil && !w.done {
		w.timer = time.AfterFunc(w.grace, func() { w.stop(errAfterResult) })
	}
}

// finish stops the grace timer once the process has ended.
func (w *resultWatch) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}
