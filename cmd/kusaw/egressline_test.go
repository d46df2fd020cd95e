package main

import (
	"strings"
	"testing"

	"github.com/kusaw/kusaw/record"
)

// A refused connection's line keeps every word of its host and reason
// (issue 27: egress lines on the console were cut at 40 characters).
func TestEgressBlockedLineWhole(t *testing.T) {
	host := "a-very-long-subdomain-name.of-some-registry.example.test"
	detail := "not in the allowlist of step build (add it to steps.build.sandbox.egress.allow, or run kusaw egress suggest)"
	ev := record.Event{Step: "build", Type: record.EvEgressBlocked, Data: map[string]any{"host": host, "port": 443, "kind": "connect", "reason": "not_allowed", "detail": detail, "decision": "refused"}}
	var out strings.Builder
	p := newProgress(&out)
	p.Event(ev)
	got := out.String()
	for _, want := range []string{"build: egress blocked: " + host + ":443", "reason=not_allowed", detail} {
		if !strings.Contains(got, want) {
			t.Errorf("line lacks %q:\n%s", want, got)
		}
	}
}
