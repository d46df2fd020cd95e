package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// TestShapeKill9 kills serve with SIGKILL while a parallel group runs and
// while a gate waits; after a restart with serve.resume both runs end
// correctly and each member's work is merged exactly once.
func TestShapeKill9(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "go-on")
	wait := `i=0; while [ ! -e ` + marker + ` ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
sandbox: {mode: required, allow_read: [`+filepath.Dir(marker)+`]}
serve: {max_parallel: 4, resume: true}
pipelines:
  group: [[left, right], after]
  gated: [build, deploy]
steps:
  left: {run: [sh, -c, "echo started; `+wait+`; echo left > left.txt"]}
  right: {run: [sh, -c, "echo started; `+wait+`; echo right > right.txt"]}
  after: {run: [sh, -c, "test -f left.txt && test -f right.txt"]}
  build: {run: [sh, -c, "echo b > b.txt"]}
  deploy:
    gate: "ship it?"
    run: [sh, -c, "test -f b.txt && echo d > d.txt"]
`, "app")
	needSandbox(t)
	sp := startServe(t, dir)
	ctx := context.Background()
	g, err := sp.client.Submit(ctx, "group", nil)
	if err != nil {
		t.Fatal(err)
	}
	gated, err := sp.client.Submit(ctx, "gated", nil)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, ".kusaw")
	waitFor(t, "both members running and the gate waiting", 30*time.Second, func() bool {
		l, _ := os.ReadFile(filepath.Join(state, "runs", g.ID, "steps", "left", "1", "stdout.log"))
		r, _ := os.ReadFile(filepath.Join(state, "runs", g.ID, "steps", "right", "1", "stdout.log"))
		rec, _ := os.ReadFile(filepath.Join(state, "runs", gated.ID, "run.json"))
		return strings.Contains(string(l), "started") && strings.Contains(string(r), "started") && strings.Contains(string(rec), `"waiting"`)
	})
	_ = sp.cmd.Process.Kill()
	_ = sp.cmd.Wait()
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sp2 := startServe(t, dir)
	d := waitDetail(t, sp2.client, g.ID, 60*time.Second)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("group run after restart: %s %s", d.Run.State, d.Run.Message)
	}
	app := filepath.Join(dir, "app")
	log := git(t, app, "log", "--format=%s", "kusaw/"+g.ID)
	for _, step := range []string{"left", "right"} {
		if n := strings.Count(log, "merge step "+step+" "); n != 1 {
			t.Fatalf("step %s merged %d times into the run branch:\n%s", step, n, log)
		}
	}
	if onBranch(dir, g.ID, "left.txt") != "left" || onBranch(dir, g.ID, "right.txt") != "right" {
		t.Fatal("a member's work is missing after the restart")
	}

	// The gated run waits again after the restart (its first step is not
	// run again) and goes on when approved.
	waitFor(t, "the gated run to wait again", 30*time.Second, func() bool {
		rec, err := sp2.client.LoadRun(gated.ID)
		return err == nil && rec.State == status.RunWaiting
	})
	if _, err := sp2.client.DecideGate(gated.ID, record.GateDecision{Approve: true, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	d = waitDetail(t, sp2.client, gated.ID, 30*time.Second)
	if d.Run.State != status.RunSucceeded || onBranch(dir, gated.ID, "d.txt") != "d" {
		t.Fatalf("gated run after restart and approval: %s %s", d.Run.State, d.Run.Message)
	}
	builds := 0
	for _, a := range d.Attempts {
		if a.Step == "build" {
			builds++
		}
	}
	if builds != 1 {
		t.Fatalf("build ran %d times; the resumed run should start at the gate", builds)
	}
	sp2.stop(t)
	checkRecordsIntact(t, state)
	checkNothingLeft(t, dir, state)
}
