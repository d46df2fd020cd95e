package status

import (
	"flag"
	"testing"

	"github.com/kusaw/kusaw/internal/generated"
)

var update = flag.Bool("update", false, "rewrite the generated reference page")

const page = "../docs/reference/statuses.md"

func TestStatusesPageFresh(t *testing.T) {
	generated.CheckPage(t, page, Markdown(), *update)
}

func TestEnumerationsComplete(t *testing.T) {
	seen := map[Reason]bool{}
	for _, r := range Reasons {
		if r.Code == "" || r.Message == "" || r.Fix == "" {
			t.Errorf("reason %q lacks a message or fix", r.Code)
		}
		if seen[r.Code] {
			t.Errorf("reason %q listed twice", r.Code)
		}
		seen[r.Code] = true
	}
	codes := map[ExitCode]bool{}
	for _, e := range ExitCodes {
		if codes[e.Code] {
			t.Errorf("exit code %d listed twice", e.Code)
		}
		codes[e.Code] = true
	}
	if !RunSucceeded.Final() || RunRunning.Final() {
		t.Error("Final is wrong")
	}
}
