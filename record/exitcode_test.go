package record

import (
	"syscall"
	"testing"

	"github.com/kusaw/kusaw/status"
)

func TestSignalNumberRoundTrip(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT} {
		if got := signalNumber(sig.String()); got != int(sig) {
			t.Errorf("%q -> %d, want %d", sig.String(), got, int(sig))
		}
	}
}

// sandbox exec exits with its command's own status, 128+n for a signal,
// 4 refused, 130 canceled, 1 for any other failure.
func TestAttemptExitCode(t *testing.T) {
	exit := func(n int) *int { return &n }
	for i, c := range []struct {
		a    AttemptRecord
		want status.ExitCode
	}{
		{AttemptRecord{Outcome: status.OutcomePassed, Processes: []ProcessRecord{{Exit: exit(0)}}}, 0},
		{AttemptRecord{Outcome: status.OutcomeFailed, Processes: []ProcessRecord{{Exit: exit(42)}}}, 42},
		{AttemptRecord{Outcome: status.OutcomeFailed, Processes: []ProcessRecord{{Exit: exit(0)}, {Exit: exit(3)}}}, 3},
		{AttemptRecord{Outcome: status.OutcomeTimedOut, Processes: []ProcessRecord{{Signal: syscall.SIGKILL.String()}}}, 137},
		{AttemptRecord{Outcome: status.OutcomeRefused, Reason: status.ReasonSandboxNoUserNS}, status.ExitSandboxUnavailable},
		{AttemptRecord{Outcome: status.OutcomeCanceled}, status.ExitInterrupted},
		{AttemptRecord{Outcome: status.OutcomeFailed, Reason: status.ReasonEgressBudget, Processes: []ProcessRecord{{Exit: exit(0)}}}, status.ExitRunFailed},
	} {
		if got := AttemptExitCode(&c.a); got != c.want {
			t.Errorf("%d: %d, want %d", i, got, c.want)
		}
	}
}
