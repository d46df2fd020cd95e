package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
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
	p := newProgress(&plain, false)
	if p.tty {
		t.Fatal("a buffer is not a terminal")
	}
	for _, ev := range evs {
		p.event(ev)
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
	p = newProgress(&js, true)
	for _, ev := range evs {
		p.event(ev)
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
		p := newProgress(&out, false)
		for _, ev := range evs {
			if viaJSON {
				b, _ := json.Marshal(ev)
				ev = record.Event{}
				if err := json.Unmarshal(b, &ev); err != nil {
					t.Fatal(err)
				}
			}
			p.event(ev)
		}
		if p.of != 3 || !strings.Contains(out.String(), "a: attempt 2 passed in 1.5s") {
			t.Errorf("through JSON %v: of %d, output:\n%s", viaJSON, p.of, out.String())
		}
	}
}
