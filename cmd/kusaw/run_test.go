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
