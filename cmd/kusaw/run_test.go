package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func TestProgressPlainAndJSON(t *testing.T) {
	evs := []record.Event{
		{Seq: 1, TS: time.Now(), Run: "r1", Type: record.EvRunStarted, Data: map[string]any{"pipeline": "default", "steps": []string{"a"}}},
		{Seq: 1, TS: time.Now(), Run: "r1", Step: "a", Attempt: 1, Type: record.EvAttemptStarted, Data: map[string]any{"of": 2, "mode": "required"}},
		{Seq: 2, TS: time.Now(), Run: "r1", Step: "a", Attempt: 1, Type: record.EvProcessStarted, Data: map[string]any{"pid": 42}},
		{Seq: 3, TS: time.Now(), Run: "r1", Step: "a", Attempt: 1, Type: record.EvEgressBlocked, Data: map[string]any{"host": "evil.example", "port": 443}},
		{Seq: 4, TS: time.Now(), Run: "r1", Step: "a", Attempt: 1, Type: record.EvAttemptFinished, Data: map[string]any{"outcome": "failed", "duration_ms": int64(1500), "reason": "step.exit_nonzero", "message": "exit code 1"}},
	}
	var plain bytes.Buffer
	p := newProgress(&plain)
	if p.tty {
		t.Fatal("a buffer is not a terminal")
	}
	for _, ev := range evs {
		p.Event(ev)
	}
	out := plain.String()
	for _, want := range []string{"run r1: pipeline default [a]", "a: attempt 1/2 started (sandbox required)", "egress blocked", "evil.example", "a: attempt 1 failed in 1.5s (step.exit_nonzero: exit code 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("plain output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") || strings.Contains(out, "pid=42") {
		t.Errorf("plain output has terminal redraws or chatty events:\n%s", out)
	}
	var js bytes.Buffer
	jp := newRunPrinter(&js, io.Discard, true, "always")
	for _, ev := range evs {
		jp.Event(ev)
	}
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != len(evs) {
		t.Fatalf("%d JSON lines for %d events", len(lines), len(evs))
	}
	for i, l := range lines {
		var ev record.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Type != evs[i].Type {
			t.Errorf("line %d: %q (%v)", i, l, err)
		}
	}
}

// An event's numbers are ints in the process that emitted it and float64
// once they went through JSON (kusaw run following serve): progress reads
// both the same.
func TestProgressNumbersEitherWay(t *testing.T) {
	evs := []record.Event{
		{Seq: 1, TS: time.Now(), Run: "r1", Step: "a", Attempt: 2, Type: record.EvAttemptStarted, Data: map[string]any{"attempt": 2, "of": 3, "mode": "off"}},
		{Seq: 2, TS: time.Now(), Run: "r1", Step: "a", Attempt: 2, Type: record.EvAttemptFinished, Data: map[string]any{"outcome": "passed", "duration_ms": 1500}},
	}
	for _, viaJSON := range []bool{false, true} {
		var out bytes.Buffer
		p := newProgress(&out)
		for _, ev := range evs {
			if viaJSON {
				b, _ := json.Marshal(ev)
				ev = record.Event{}
				if err := json.Unmarshal(b, &ev); err != nil {
					t.Fatal(err)
				}
			}
			p.Event(ev)
		}
		if p.of != 3 || !strings.Contains(out.String(), "a: attempt 2 passed in 1.5s") {
			t.Errorf("through JSON %v: of %d, output:\n%s", viaJSON, p.of, out.String())
		}
	}
}

// fakeRunClient is a run that waits for Cancel, then ends canceled with
// the records a real client would hand back.
type fakeRunClient struct {
	started  chan struct{}
	canceled chan struct{}
	onEvent  func(record.Event)
	rec      *record.RunRecord
}

func (f *fakeRunClient) Start(pipeline string, params map[string]string) error {
	if pipeline == "nope" {
		return exitf(status.ExitUsage, "no pipeline %q", pipeline)
	}
	close(f.started)
	return nil
}

func (f *fakeRunClient) Wait() error {
	f.onEvent(record.Event{TS: time.Now(), Run: f.rec.ID, Type: record.EvRunStarted, Data: map[string]any{"pipeline": "default", "steps": []string{"a"}}})
	<-f.canceled
	f.onEvent(record.Event{TS: time.Now(), Run: f.rec.ID, Type: record.EvCancelRequested})
	return nil
}

func (f *fakeRunClient) Cancel() { close(f.canceled) }

func (f *fakeRunClient) Result() (*record.RunRecord, []*record.AttemptRecord, error) {
	return f.rec, nil, nil
}

func (f *fakeRunClient) Close() {}

// kusaw run's one path: the first SIGINT reaches the client as Cancel
// (whichever client it is), the printer says so, the refusal summary and
// the failure come from the ended run's record, and the exit code from
// exitCode on what followRun returns.
func TestFollowRunSignalCancelsThroughClient(t *testing.T) {
	now := time.Now()
	rec := &record.RunRecord{ID: "r1", State: status.RunCanceled, Started: &now, Finished: &now,
		Reason: "run.canceled", Message: "canceled by SIGINT",
		EgressBlocked: 3, EgressRefused: []string{"a attempt 1: evil.example:443 refused: not in the allowlist"}}
	var stdout, stderr bytes.Buffer
	fc := &fakeRunClient{started: make(chan struct{}), canceled: make(chan struct{}), rec: rec}
	out := newRunPrinter(&stdout, &stderr, false, "never")
	fc.onEvent = out.Event
	go func(started chan struct{}) {
		<-started
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
	}(fc.started)
	err := followRun(fc, out, "", nil)
	if got := exitCode(err); got != status.ExitInterrupted {
		t.Fatalf("exit code %d (%v), want %d", got, err, status.ExitInterrupted)
	}
	for _, want := range []string{
		"kusaw: canceling the run (signal again to stop at once)",
		"kusaw: the egress proxy refused 3 connection(s):\n  a attempt 1: evil.example:443 refused: not in the allowlist\n  ... and more: see each attempt's egress.log\n",
		"kusaw: run.canceled: canceled by SIGINT",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	for _, want := range []string{"run r1: pipeline default [a]", "cancel requested", "run r1 canceled in "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	// --json: stdout is the events only; stderr still says why.
	stdout.Reset()
	stderr.Reset()
	fc = &fakeRunClient{started: make(chan struct{}), canceled: make(chan struct{}), rec: rec}
	out = newRunPrinter(&stdout, &stderr, true, "never")
	fc.onEvent = out.Event
	close(fc.canceled)
	if got := exitCode(followRun(fc, out, "", nil)); got != status.ExitInterrupted {
		t.Fatalf("--json: exit code %d", got)
	}
	if n := strings.Count(stdout.String(), "\n"); n != 2 || strings.Contains(stdout.String(), "run r1 canceled") {
		t.Errorf("--json stdout is not just the 2 events:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "kusaw: run.canceled: canceled by SIGINT") || strings.Contains(stderr.String(), "canceling the run") {
		t.Errorf("--json stderr:\n%s", stderr.String())
	}
	// A refused start is the client's error, and nothing of the run is
	// printed.
	stdout.Reset()
	fc = &fakeRunClient{started: make(chan struct{}), canceled: make(chan struct{}), rec: rec}
	if got := exitCode(followRun(fc, newRunPrinter(&stdout, &stderr, false, "never"), "nope", nil)); got != status.ExitUsage || stdout.Len() != 0 {
		t.Errorf("unknown pipeline: exit %d, stdout %q", got, stdout.String())
	}
}
