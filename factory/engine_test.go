package factory

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/worktree"
)

type fakeSecrets map[string]string

func (f fakeSecrets) Get(k string) (string, error) {
	v, ok := f[k]
	if !ok {
		return "", os.ErrNotExist
	}
	return v, nil
}

func TestRequiredAttemptRefusedWhenSandboxUnavailable(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [boxed]
steps:
  boxed:
    sandbox: required
    attempts: 3
    run: [touch, `+marker+`]
`, "app")
	var events []record.Event
	e, err := New(f, Options{Kusaw: "/bin/false", OnEvent: func(ev record.Event) { events = append(events, ev) },
		SandboxCheck: func() sandbox.CheckResult {
			return sandbox.CheckResult{Backend: "bubblewrap", Reason: status.ReasonSandboxNoUserNS, Msg: "no user namespaces here", Fix: "allow them"}
		}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if c := runExit(e, r); c != status.ExitSandboxUnavailable {
		t.Errorf("exit code %d, want %d", c, status.ExitSandboxUnavailable)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a required attempt ran although the sandbox is unavailable")
	}
	atts, _ := e.State.Attempts(r.Record)
	if len(atts) != 1 || atts[0].Outcome != status.OutcomeRefused || atts[0].Reason != status.ReasonSandboxNoUserNS || atts[0].Fix != "allow them" {
		t.Fatalf("attempts: %+v (a refusal is not retried)", atts)
	}
	if r.Record.State != status.RunFailed || r.Record.Fix != "allow them" {
		t.Errorf("run: %+v", r.Record)
	}
}

func TestSandboxOffStepRunsWhenBackendUnavailable(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [plain]
steps:
  plain:
    run: ["true"]
`, "app")
	e, _ := New(f, Options{SandboxCheck: func() sandbox.CheckResult { return sandbox.CheckResult{Reason: status.ReasonSandboxUnavailable} }})
	r, _ := e.Run(context.Background(), "")
	if c := runExit(e, r); c != status.ExitOK {
		t.Fatalf("exit %d: %+v", c, r.Record)
	}
}

func TestSecretsResolvedAndRedacted(t *testing.T) {
	const secret = "tok-9f8e7d6c5b4a"
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [leaky]
steps:
  leaky:
    env:
      TOKEN: {secret: steps.leaky.env.TOKEN}
      PLAIN: visible
    attempts: 2
    run: [sh, -c, 'case "$TOKEN" in tok-9f8e*) ;; *) exit 9;; esac; echo "out $TOKEN"; echo "err $TOKEN" >&2; exit 4']
`, "app")
	var streamed bytes.Buffer
	e, _ := New(f, Options{Secrets: fakeSecrets{"steps.leaky.env.TOKEN": secret}, OnEvent: func(ev record.Event) {
		b, _ := json.Marshal(ev)
		streamed.Write(b)
	}})
	r, _ := e.Run(context.Background(), "")
	atts, _ := e.State.Attempts(r.Record)
	if len(atts) != 2 || atts[0].ExitCode == nil || *atts[0].ExitCode != 4 {
		t.Fatalf("the step did not get its secret: %+v", atts[0])
	}
	if atts[0].Processes[0].Env["TOKEN"] != attempt.SecretRedacted || atts[0].Processes[0].Env["PLAIN"] != "visible" {
		t.Errorf("recorded env: %v", atts[0].Processes[0].Env)
	}
	out, _ := os.ReadFile(filepath.Join(e.State.AttemptDir(r.ID(), "leaky", 1), record.StdoutFile))
	if string(out) != "out <secret>\n" {
		t.Errorf("stdout.log = %q", out)
	}
	leaks := grepTree(t, r.Dir, secret)
	if len(leaks) > 0 {
		t.Errorf("the secret appears in %v", leaks)
	}
	if strings.Contains(streamed.String(), secret) {
		t.Errorf("the secret reached the event callback")
	}
}

func TestSecretMissingRefuses(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [s]
steps:
  s:
    env:
      TOKEN: {secret: steps.s.env.TOKEN}
    run: ["true"]
`, "app")
	e, _ := New(f, Options{Secrets: fakeSecrets{}})
	r, _ := e.Run(context.Background(), "")
	atts, _ := e.State.Attempts(r.Record)
	if len(atts) != 1 || atts[0].Outcome != status.OutcomeRefused || atts[0].Reason != status.ReasonSecretMissing || !strings.Contains(atts[0].Fix, "kusaw config set steps.s.env.TOKEN --secret") {
		t.Fatalf("attempt: %+v", atts)
	}
	if c := runExit(e, r); c != status.ExitRunFailed {
		t.Errorf("exit %d, want 1 (a missing secret is not a sandbox refusal)", c)
	}
}

// runExit is kusaw run's exit status for a run: record.RunExitCode over
// all its attempts, as cmd/kusaw decides it.
func runExit(e *Engine, r *Run) status.ExitCode {
	all, _ := e.State.AllAttempts(r.Record)
	return record.RunExitCode(r.Record, all)
}

// grepTree lists the files under dir that contain s.
func grepTree(t *testing.T, dir, s string) []string {
	t.Helper()
	var hits []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(s)) {
			hits = append(hits, p)
		}
		return nil
	})
	return hits
}

func TestRunIDsSortByTime(t *testing.T) {
	a := NewRunID(time.Date(2026, 11, 30, 3, 15, 0, 0, time.UTC))
	b := NewRunID(time.Date(2026, 11, 30, 3, 15, 1, 0, time.UTC))
	if !(a < b) || !strings.HasPrefix(a, "20261130-031500-") || len(a) != len("20261130-031500-ab12") {
		t.Errorf("ids %q %q", a, b)
	}
}

func TestRecoveryMarksAbandonedRunInterrupted(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [s]
steps:
  s:
    run: ["true"]
`, "app")
	e, _ := New(f, Options{})
	r, err := e.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	// The owner is alive (this process holds the lock): not recovered.
	st, _ := OpenState(f.StateDir)
	if len(st.Recovered) != 0 {
		t.Fatalf("a live run was recovered: %v", st.Recovered)
	}
	// Simulate a dead owner mid-attempt: a worktree exists, the lock is gone.
	r.Record.State = status.RunRunning
	if err := e.createRunBranches(r); err != nil {
		t.Fatal(err)
	}
	// What the attempt records before it adds its worktree.
	dir := record.AttemptDir(r.Dir, "s", 1)
	rr := r.Record.Repos[0]
	w := record.WorktreeRecord{Repo: "app", RepoPath: rr.Path, Path: filepath.Join(dir, record.WorktreesDir, "app"), Branch: worktree.AttemptBranch(r.ID(), "s", 1)}
	repo, err := worktree.OpenRepo(rr.Path)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.AddAttempt(rr.Branch, w.Branch, w.Path)
	if err != nil {
		t.Fatal(err)
	}
	w.GitDir, w.BaseSHA = wt.GitDir, wt.BaseSHA
	if err := writeJSON(filepath.Join(dir, record.AttemptFile), &record.AttemptRecord{Run: r.ID(), Step: "s", Number: 1, Started: time.Now(), Worktrees: []record.WorktreeRecord{w}}); err != nil {
		t.Fatal(err)
	}
	r.lock.Unlock()
	st, err = OpenState(f.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Recovered) != 1 || st.Recovered[0] != r.ID() {
		t.Fatalf("recovered %v", st.Recovered)
	}
	rec, _ := st.LoadRun(r.ID())
	if rec.State != status.RunInterrupted {
		t.Errorf("state %s", rec.State)
	}
	atts, _ := st.Attempts(rec)
	if len(atts) != 1 || atts[0].Outcome != status.OutcomeInterrupted {
		t.Errorf("attempts %+v", atts)
	}
	app := filepath.Join(f.Dir, "app")
	if out := testkit.GitRun(t, app, "worktree", "list"); strings.Count(out, "\n") != 0 {
		t.Errorf("worktrees left:\n%s", out)
	}
	if again, _ := OpenState(f.StateDir); len(again.Recovered) != 0 {
		t.Errorf("recovered twice")
	}
}

func TestRunBranchLeftByCrashIsReused(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [s]
steps:
  s:
    run: ["true"]
`, "app")
	e, _ := New(f, Options{})
	app := filepath.Join(f.Dir, "app")
	r, err := e.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	// The branch exists at the base: a crash came between creating it and
	// recording it. The run takes it over.
	testkit.GitRun(t, app, "branch", "kusaw/"+r.ID(), "main")
	if err := e.createRunBranches(r); err != nil {
		t.Fatalf("reuse: %v", err)
	}
	// Elsewhere than the base, it is not the run's: refused.
	r2, _ := e.Prepare("")
	testkit.GitRun(t, app, "commit", "-q", "--allow-empty", "-m", "moved")
	testkit.GitRun(t, app, "branch", "kusaw/"+r2.ID(), "main")
	testkit.GitRun(t, app, "reset", "-q", "--hard", "HEAD~1")
	if err := e.createRunBranches(r2); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a foreign branch was taken over: %v", err)
	}
	r.lock.Unlock()
	r2.lock.Unlock()
}

// A local attempt runs from its spec, which is plain data: spec.json beside
// attempt.json names no path of this machine and its secrets only by key.
func TestLocalAttemptRunsFromSpec(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
  other: {path: ./other}
pipelines:
  default: [edit]
steps:
  edit:
    repos: [app]
    env:
      TOKEN: {secret: tok}
    run: [sh, -c, 'echo "$TOKEN" > out.txt']
`, "app", "other")
	e, err := New(f, Options{Kusaw: "/bin/false", Secrets: fakeSecrets{"tok": "s3cr3t-value"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %+v", r.Record.State, r.Record)
	}
	b, err := os.ReadFile(filepath.Join(record.AttemptDir(r.Dir, "edit", 1), record.SpecFile))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := record.ParseSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.Dir, f.StateDir, f.Repos["app"].Path, "s3cr3t-value"} {
		if strings.Contains(string(b), p) {
			t.Errorf("spec.json carries %q:\n%s", p, b)
		}
	}
	if len(spec.Repos) != 1 || spec.Repos[0].Name != "app" || spec.Repos[0].Base != r.Record.Repos[0].BaseSHA {
		t.Errorf("spec repos %+v, run repos %+v", spec.Repos, r.Record.Repos)
	}
	if len(spec.Secrets) != 1 || spec.Secrets[0] != "tok" {
		t.Errorf("spec secrets %v", spec.Secrets)
	}
	atts, _ := e.State.Attempts(r.Record)
	if len(atts) != 1 || atts[0].Worktrees[0].BaseSHA != spec.Repos[0].Base {
		t.Errorf("attempt did not start from the spec's base: %+v", atts)
	}
}
