package record

import "testing"

// A result may name the attempt's logs and nothing serve writes.
func TestResultFile(t *testing.T) {
	repos := []string{"app", "lib.go"}
	for _, n := range []string{StdoutFile, StderrFile, SetupLogFile, EgressLogFile, WorkerEventsFile, "stdout-app.log", "stderr-lib.go.log"} {
		if !ResultFile(n, repos) {
			t.Errorf("%s refused", n)
		}
	}
	for _, n := range []string{EventsFile, AttemptFile, SpecFile, RunFile, "../stdout.log", "x/stdout.log", "/stdout.log", "stdout-other.log", "stdout-.log", "", ".", "egress.log.refused", "artifacts.tar"} {
		if ResultFile(n, repos) {
			t.Errorf("%q accepted", n)
		}
	}
}
