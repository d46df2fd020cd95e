package main

import (
	"fmt"
	"strings"

	"github.com/kusaw/kusaw/record"
)

// egressBlockedLine is kusaw run's line for a refused connection, whole:
// the host, the port, why and what to change are what the reader needs,
// so unlike other events' summaries no value is cut.
func egressBlockedLine(ev record.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: egress blocked: %v:%v", ev.Step, ev.Data["host"], ev.Data["port"])
	for _, k := range []string{"kind", "decision", "reason"} {
		if v, ok := ev.Data[k]; ok && fmt.Sprint(v) != "" {
			fmt.Fprintf(&b, " %s=%v", k, v)
		}
	}
	if v, ok := ev.Data["detail"]; ok && fmt.Sprint(v) != "" {
		fmt.Fprintf(&b, ": %v", v)
	}
	return b.String()
}
