package factory

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

// allShapes is a pipeline with each helper-running shape: a fix loop, a
// judge of candidates and a parallel group whose merge a resolve finishes.
const allShapes = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [check, try, [one, two]]
steps:
  check:
    attempts: 2
    on_failure: fixer
    run: [sh, -c, "test -f fixed.txt || { echo missing fixed.txt; exit 1; }"]
  fixer:
    run: [sh, -c, "echo fixing; echo yes > fixed.txt"]
  try:
    candidates: 2
    select: judge:pick
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt"]
  pick:
    run: [sh, -c, "echo 2 > $KUSAW_ARTIFACTS/choice"]
  one: {run: [sh, -c, "echo one > README"], resolve: merger}
  two: {run: [sh, -c, "echo two > README"]}
  merger: {run: [sh, -c, "echo both > README"]}
`

// TestHelpersLabelled: the attempts of a fixer, a judge and a resolve are
// the run's helpers, in the order they ran, each with the role it played
// (in attempt.json and in its sealed attempt.started event); Attempts
// stays the pipeline's own steps, which decide the outcome.
func TestHelpersLabelled(t *testing.T) {
	r, _, _ := shapeRun(t, allShapes)
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s %s: %s", r.Record.State, r.Record.Reason, r.Record.Message)
	}
	st := r.e.State
	own, _ := st.Attempts(r.Record)
	if len(own) != 6 {
		t.Fatalf("the pipeline's own attempts: %d, want 6 (check 2, try 2, one, two)", len(own))
	}
	for _, a := range own {
		if a.Role != nil || a.Step == "fixer" || a.Step == "pick" || a.Step == "merger" {
			t.Errorf("a helper among the pipeline's attempts: %s %d %+v", a.Step, a.Number, a.Role)
		}
	}
	helpers, err := st.Helpers(r.Record)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		step, kind, label string
	}{
		{"fixer", record.RoleFixer, "fixer for step check after its attempt 1"},
		{"pick", record.RoleJudge, "judge of step try's candidates"},
		{"merger", record.RoleResolve, "resolve of group 1 (step two's merge in repo app)"},
	}
	if len(helpers) != len(want) {
		t.Fatalf("helpers: %d, want %d", len(helpers), len(want))
	}
	for i, w := range want {
		h := helpers[i]
		if h.Step != w.step || h.Role == nil || h.Role.Kind != w.kind || h.Role.Label != w.label {
			t.Fatalf("helper %d: %s %+v, want %s %q", i, h.Step, h.Role, w.step, w.label)
		}
		if i > 0 && h.Started.Before(helpers[i-1].Started) {
			t.Errorf("helpers out of the order they ran: %s before %s", helpers[i-1].Step, h.Step)
		}
		// The sealed events of the attempt carry its role too.
		f, err := os.Open(filepath.Join(st.AttemptDir(r.ID(), h.Step, h.Number), record.EventsFile))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev struct {
				Type string `json:"type"`
				Data struct {
					Role *record.AttemptRole `json:"role"`
				} `json:"data"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == record.EvAttemptStarted && ev.Data.Role != nil && ev.Data.Role.Label == w.label {
				found = true
			}
		}
		f.Close()
		if !found {
			t.Errorf("%s's attempt.started event has no role %q", h.Step, w.label)
		}
	}
	if h := helpers[0]; h.Role.For != "check" || h.Role.After != 1 {
		t.Errorf("fixer role: %+v", h.Role)
	}
	if h := helpers[2]; h.Role.Group != 1 || h.Role.Repo != "app" {
		t.Errorf("resolve role: %+v", h.Role)
	}
	all, _ := st.AllAttempts(r.Record)
	if len(all) != len(own)+len(helpers) {
		t.Fatalf("AllAttempts: %d, want %d", len(all), len(own)+len(helpers))
	}
}

// TestHelperRefusalExitCode: a judge the sandbox refuses fails the step
// whose candidates it judged, and the run exits 4 (sandbox unavailable),
// as a step's own refusal would; the exit code read from the records
// (what serve's run detail gives kusaw run) agrees once the helpers are
// among the attempts it reads, and not from the pipeline's alone.
func TestHelperRefusalExitCode(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
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
`, "app")
	e, err := New(f, Options{Kusaw: "/bin/false", SandboxCheck: func() sandbox.CheckResult {
		return sandbox.CheckResult{Backend: "bubblewrap", Reason: status.ReasonSandboxNoUserNS, Msg: "no user namespaces here", Fix: "allow them"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Record.State != status.RunFailed || runExit(e, r) != status.ExitSandboxUnavailable {
		t.Fatalf("run %s, exit %d: %s", r.Record.State, runExit(e, r), r.Record.Message)
	}
	own, _ := e.State.Attempts(r.Record)
	helpers, _ := e.State.Helpers(r.Record)
	if len(own) != 2 || len(helpers) != 1 || helpers[0].Outcome != status.OutcomeRefused || helpers[0].Role == nil || helpers[0].Role.Kind != record.RoleJudge {
		t.Fatalf("attempts %d, helpers %+v", len(own), helpers)
	}
	if got := record.RunExitCode(r.Record, own); got != status.ExitRunFailed {
		t.Errorf("from the pipeline's attempts alone: %d (the judge's refusal is not among them)", got)
	}
}

// TestHelperAlsoInPipeline: a step that is both a fixer and a pipeline
// step has its fixer attempt among the helpers and its own run among the
// pipeline's attempts, never both.
func TestHelperAlsoInPipeline(t *testing.T) {
	r, _, _ := shapeRun(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [check, fixer]
steps:
  check:
    attempts: 2
    on_failure: fixer
    run: [sh, -c, "test -f fixed.txt || exit 1"]
  fixer:
    run: [sh, -c, "echo yes > fixed.txt"]
`)
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", r.Record.State, r.Record.Message)
	}
	own, _ := r.e.State.Attempts(r.Record)
	helpers, _ := r.e.State.Helpers(r.Record)
	var got []string
	for _, a := range own {
		got = append(got, a.Step+"/"+string(rune('0'+a.Number)))
	}
	if len(helpers) != 1 || helpers[0].Step != "fixer" || helpers[0].Number != 1 || helpers[0].Role == nil || helpers[0].Role.After != 1 {
		t.Fatalf("helpers: %+v", helpers)
	}
	if len(own) != 3 || own[2].Step != "fixer" || own[2].Number != 2 || own[2].Role != nil {
		t.Fatalf("the pipeline's attempts: %v", got)
	}
}
