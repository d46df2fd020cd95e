package serve

import (
	"context"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

// TestDetailHelpers: a run's detail lists its helpers apart from the
// pipeline's attempts, each with its role, and its exit code counts a
// helper's sandbox refusal as kusaw run in-process does (4), so kusaw run
// exits alike through serve.
func TestDetailHelpers(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [try]
steps:
  try:
    candidates: 2
    select: judge:pick
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt"]
  pick:
    sandbox: required
    run: [sh, -c, "echo 1 > $KUSAW_ARTIFACTS/choice"]
`)
	var opts ServeOptions
	opts.Engine.SandboxCheck = func() sandbox.CheckResult {
		return sandbox.CheckResult{Backend: "bubblewrap", Reason: status.ReasonSandboxNoUserNS, Msg: "no user namespaces here", Fix: "allow them"}
	}
	_, c, _ := startServer(t, f, opts)
	rec, err := c.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := waitRun(t, c, rec.ID, 30*time.Second)
	if d.Run.State != status.RunFailed || len(d.Attempts) != 2 || len(d.Helpers) != 1 {
		t.Fatalf("run %s: %d attempts, %d helpers: %s", d.Run.State, len(d.Attempts), len(d.Helpers), d.Run.Message)
	}
	h := d.Helpers[0]
	if h.Step != "pick" || h.Outcome != status.OutcomeRefused || h.Role == nil || h.Role.Kind != record.RoleJudge || h.Role.Label != "judge of step try's candidates" {
		t.Fatalf("helper: %s %s %+v", h.Step, h.Outcome, h.Role)
	}
	if d.ExitCode != status.ExitSandboxUnavailable {
		t.Errorf("exit code %d, want %d (the judge's refusal)", d.ExitCode, status.ExitSandboxUnavailable)
	}
	for _, a := range d.Attempts {
		if a.Step != "try" || a.Role != nil {
			t.Errorf("a helper among the pipeline's attempts: %s %+v", a.Step, a.Role)
		}
	}
}
