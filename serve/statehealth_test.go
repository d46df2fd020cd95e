package serve

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// The health of the state folder follows its write test: a failure is
// reported with the folder, the error, the attempt that failed and the
// fix; an attempt's state.write_failed makes the next answer test at
// once; a passing test clears it.
func TestStateHealthFollowsTheWriteTest(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var fail error
	tests := 0
	h := newStateHealth("/srv/kusaw/state", zerolog.Nop())
	h.now = func() time.Time { return now }
	h.write = func(dir string) error {
		tests++
		if dir != "/srv/kusaw/state" {
			t.Errorf("tested %s", dir)
		}
		return fail
	}
	if sh := h.health(); !sh.Writable || sh.Dir != "/srv/kusaw/state" || sh.Reason != "" || tests != 1 {
		t.Fatalf("a writable folder: %+v after %d tests", sh, tests)
	}
	// The disk fills: within writeTestEvery the last verdict stands.
	fail = syscall.ENOSPC
	if sh := h.health(); !sh.Writable || tests != 1 {
		t.Fatalf("tested again within %s: %+v, %d tests", writeTestEvery, sh, tests)
	}
	// Another event does not make it test again; an attempt that failed
	// to write does.
	h.event(record.Event{Run: "r1", Step: "flood", Attempt: 1, Type: record.EvAttemptFinished, Data: map[string]any{"outcome": status.OutcomeFailed, "reason": status.ReasonStepExitNonzero}})
	if sh := h.health(); !sh.Writable || tests != 1 {
		t.Fatalf("a failed step's attempt made it test: %+v, %d tests", sh, tests)
	}
	h.event(record.Event{Run: "r1", Step: "flood", Attempt: 1, Type: record.EvAttemptFinished, Data: map[string]any{"outcome": status.OutcomeFailed,
		"reason": status.ReasonStateWriteFailed, "message": "cannot write /srv/kusaw/state/runs/r1/steps/flood/1/stdout.log: no space left on device"}})
	sh := h.health()
	if sh.Writable || tests != 2 || sh.Reason != status.ReasonStateWriteFailed || sh.Since == nil || !sh.Since.Equal(now) {
		t.Fatalf("a full folder: %+v after %d tests", sh, tests)
	}
	for _, want := range []string{"the state folder /srv/kusaw/state is full or not writable: no space left on device", "attempt 1 of step flood (run r1): cannot write /srv/kusaw/state/runs/r1/steps/flood/1/stdout.log"} {
		if !strings.Contains(sh.Message, want) {
			t.Errorf("message lacks %q: %s", want, sh.Message)
		}
	}
	if !strings.Contains(sh.Fix, "df -h /srv/kusaw/state") {
		t.Errorf("fix: %s", sh.Fix)
	}
	// Space is freed: the next test, writeTestEvery later, clears it.
	fail = nil
	now = now.Add(writeTestEvery)
	if sh := h.health(); !sh.Writable || sh.Message != "" || sh.Since != nil || tests != 3 {
		t.Fatalf("after space was freed: %+v, %d tests", sh, tests)
	}
}
