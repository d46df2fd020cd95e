package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/worktree"
)

func writeRun(t *testing.T, st *State, rec record.RunRecord) {
	t.Helper()
	dir := st.RunDir(rec.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(dir, record.RunFile), &rec); err != nil {
		t.Fatal(err)
	}
}

func TestStateRunsAndIDs(t *testing.T) {
	st, err := OpenState(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"20261130-031500-ab12", "20261130-031501-cd34", "20261129-235959-0000"} {
		writeRun(t, st, record.RunRecord{ID: id, Pipeline: "default", State: status.RunSucceeded, Created: time.Now()})
	}
	os.MkdirAll(st.RunDir("20261130-040000-half"), 0o755) // a folder without a record yet
	runs, err := st.Runs()
	if err != nil || len(runs) != 3 || runs[0].ID != "20261130-031501-cd34" || runs[2].ID != "20261129-235959-0000" {
		t.Fatalf("runs newest first: %v %v", runs, err)
	}
	if r, err := st.LoadRun("20261129"); err != nil || r.ID != "20261129-235959-0000" {
		t.Errorf("unique prefix: %v %v", r, err)
	}
	if _, err := st.LoadRun("20261130-0315"); !errors.Is(err, record.ErrAmbiguousRun) || !strings.Contains(err.Error(), "20261130-0315") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	for _, bad := range []string{"nope", "", "../x", ".."} {
		if _, err := st.LoadRun(bad); !errors.Is(err, record.ErrNoRun) {
			t.Errorf("LoadRun(%q): %v", bad, err)
		}
	}
	if _, err := st.RequestCancel("20261130-031500-ab12"); err == nil {
		t.Error("canceling a finished run succeeded")
	}
}

func TestRecoverySkipsRunsWithLiveOwner(t *testing.T) {
	st, _ := OpenState(t.TempDir())
	rec := record.RunRecord{ID: "20261130-031500-live", State: status.RunRunning, Created: time.Now()}
	writeRun(t, st, rec)
	l, ok, err := TryLock(filepath.Join(st.RunDir(rec.ID), record.LockFile))
	if err != nil || !ok {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(st.Dir, record.ActiveDir, rec.ID), nil, 0o644)
	again, _ := OpenState(st.Dir)
	if got, _ := again.LoadRun(rec.ID); got.State != status.RunRunning || len(again.Recovered) != 0 {
		t.Fatalf("a run whose owner holds its lock was recovered: %v", got.State)
	}
	l.Unlock()
	again, _ = OpenState(st.Dir)
	if got, _ := again.LoadRun(rec.ID); got.State != status.RunInterrupted || got.Reason != status.ReasonRunInterrupted {
		t.Fatalf("after the owner let go: %v", got.State)
	}
	if _, err := os.Stat(filepath.Join(st.Dir, record.ActiveDir, rec.ID)); err == nil {
		t.Error("the active marker stayed")
	}
}

// TestRecoverySweepsAttemptWithoutRecord: a crash between an attempt's
// folder and its attempt.json leaves no temp folder and no tree behind,
// and the attempt is recorded interrupted.
func TestRecoverySweepsAttemptWithoutRecord(t *testing.T) {
	f, r := preparedRun(t)
	dir := record.AttemptDir(r.Dir, "a", 1)
	for _, sub := range []string{record.ArtifactsDir, record.TmpDir, record.WorktreesDir, "lease"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, record.TmpDir, "junk"), []byte("x"), 0o600)
	// A tree no repository lists (a crash caught it between its pool
	// slot and its registration) in an attempt without a record.
	os.MkdirAll(filepath.Join(dir, record.WorktreesDir, "app", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, record.WorktreesDir, "app", "sub", "README"), []byte("x"), 0o644)
	r.lock.Unlock() // the owner dies
	st, err := OpenState(f.StateDir)
	if err != nil || len(st.Recovered) != 1 {
		t.Fatalf("recovery: %v %v", st.Recovered, err)
	}
	for _, sub := range []string{record.TmpDir, record.WorktreesDir, "lease"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after recovery: %v", sub, err)
		}
	}
	rec, _ := st.LoadRun(r.ID())
	atts, _ := st.Attempts(rec)
	if rec.State != status.RunInterrupted || len(atts) != 1 || atts[0].Outcome != status.OutcomeInterrupted || rec.Steps[0].Outcome != status.OutcomeInterrupted {
		t.Fatalf("after recovery: run %s, attempts %+v, step %+v", rec.State, atts, rec.Steps[0])
	}
}

// TestRecoveryClosesEgressLog: an attempt's egress.log left open by a dead
// kusaw is closed by recovery with a recovered marker that names the lines
// it found unsealed, never with a seal over them.
func TestRecoveryClosesEgressLog(t *testing.T) {
	f, r := preparedRun(t)
	dir := record.AttemptDir(r.Dir, "a", 1)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(dir, record.AttemptFile), &record.AttemptRecord{Run: r.ID(), Step: "a", Number: 1, Started: time.Now()}); err != nil {
		t.Fatal(err)
	}
	opts := attempt.LogOptions(r.ID(), "a", 1, chainlog.KindEgress)
	opts.SealEvery, opts.SealInterval = -1, -1
	w, err := chainlog.Create(filepath.Join(dir, record.EgressLogFile), r.e.opts.Key, opts)
	if err != nil {
		t.Fatal(err)
	}
	w.Append(map[string]any{"host": "a.example", "decision": "allow"})
	w.Append(map[string]any{"host": "b.example", "decision": "refuse"})
	r.lock.Unlock() // the owner dies before sealing them
	if _, err := OpenState(f.StateDir); err != nil {
		t.Fatal(err)
	}
	res, err := chainlog.VerifyFile(filepath.Join(dir, record.EgressLogFile), r.e.PublicKey(), opts.Binding)
	if err != nil || !res.Final || len(res.Recovered) != 1 {
		t.Fatalf("egress.log after recovery: %+v %v", res, err)
	}
	if rc := res.Recovered[0]; rc.Unsealed != 2 || rc.From != 2 || rc.To != 3 {
		t.Fatalf("recovered marker %+v: want lines 2-3 named unsealed", rc)
	}
}

// TestRecoveryEndsWhatTheProcessLeft: a kusaw (and the reaper) died while
// an attempt's process group still had members: the next OpenState ends
// them, chosen by the recorded group and start time; a process of another
// group is left alone.
func TestRecoveryEndsWhatTheProcessLeft(t *testing.T) {
	f, r := preparedRun(t)
	// The attempt's process: a group leader that leaves a child running
	// in its group and exits, as a step's shell killed with kusaw does.
	leader := exec.Command("sh", "-c", "sleep 300 & echo $!")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := proc.StartID(leader.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	fmt.Fscan(out, &child)
	leader.Wait()
	defer syscall.Kill(child, syscall.SIGKILL)
	// A bystander in a group of its own.
	by := exec.Command("sleep", "300")
	by.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := by.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { by.Process.Kill(); by.Wait() }()
	if child == 0 || !proc.Alive(child) {
		t.Fatalf("the orphan %d is not running", child)
	}

	dir := record.AttemptDir(r.Dir, "a", 1)
	os.MkdirAll(dir, 0o700)
	a := &record.AttemptRecord{Run: r.ID(), Step: "a", Number: 1, Started: time.Now(),
		Processes: []record.ProcessRecord{{Argv: []string{"sh"}, PID: leader.Process.Pid, Start: start}}}
	if err := writeJSON(filepath.Join(dir, record.AttemptFile), a); err != nil {
		t.Fatal(err)
	}
	r.lock.Unlock() // the owner dies
	if _, err := OpenState(f.StateDir); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); proc.Alive(child); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("recovery left the attempt's process %d running", child)
		}
	}
	if !proc.Alive(by.Process.Pid) {
		t.Fatal("recovery ended a process of another group")
	}
}

// preparedRun is a queued run of a one-step factory whose owner (this
// test) holds its lock: the start of each crash that recovery must mend.
func preparedRun(t *testing.T) (*config.Factory, *Run) {
	t.Helper()
	f := testkit.Factory(t, `
version: 1
repos:
  app:
    path: app
pipelines:
  default: [a]
steps:
  a:
    run: [sh, -c, "true"]
`, "app")
	e, err := New(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	return f, r
}

// TestRecoveryRemovesTreeTakenFromPool: an attempt takes its tree from the
// repository's pool by renaming the slot beside its planned worktree
// path, then moves the tree there, and only then registers it with the
// repository. A kusaw killed in between left a tree no repository lists
// (and, right after the rename, the whole slot): recovery removes it, and
// the run is recovered without an error. Made as the crash leaves it, from
// a slot a real run released.
func TestRecoveryRemovesTreeTakenFromPool(t *testing.T) {
	for _, crash := range []string{"after-rename", "after-unpack", "in-register"} {
		t.Run(crash, func(t *testing.T) {
			f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [s]
steps:
  s: {run: ["true"], sandbox: off}
`, "app")
			e, err := New(f, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if first, err := e.Run(context.Background(), ""); err != nil || first.Record.State != status.RunSucceeded {
				t.Fatalf("first run: %v", err)
			}
			slots, _ := filepath.Glob(filepath.Join(f.StateDir, "pool", "*", "idle-*"))
			if len(slots) != 1 {
				t.Fatalf("the first run left %d trees in the pool, want 1", len(slots))
			}
			pool := filepath.Dir(slots[0])

			r, err := e.Prepare("")
			if err != nil {
				t.Fatal(err)
			}
			r.Record.State = status.RunRunning
			if err := e.createRunBranches(r); err != nil {
				t.Fatal(err)
			}
			// What the attempt records before it adds its worktree.
			dir := record.AttemptDir(r.Dir, "s", 1)
			wdir := filepath.Join(dir, record.WorktreesDir)
			if err := os.MkdirAll(wdir, 0o700); err != nil {
				t.Fatal(err)
			}
			rr := r.Record.Repos[0]
			w := record.WorktreeRecord{Repo: "app", RepoPath: rr.Path, Path: filepath.Join(wdir, "app"), Branch: worktree.AttemptBranch(r.ID(), "s", 1)}
			if err := writeJSON(filepath.Join(dir, record.AttemptFile), &record.AttemptRecord{Run: r.ID(), Step: "s", Number: 1, Started: time.Now(), Worktrees: []record.WorktreeRecord{w}}); err != nil {
				t.Fatal(err)
			}
			// The take, as worktree.Pool does it, up to the crash.
			stage := filepath.Join(wdir, ".pool-app")
			if err := os.Rename(slots[0], stage); err != nil {
				t.Fatal(err)
			}
			if crash != "after-rename" {
				os.MkdirAll(filepath.Join(pool, "held"), 0o700)
				if err := os.Rename(filepath.Join(stage, "index"), filepath.Join(pool, "held", "x.index")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(stage, "tree"), w.Path); err != nil {
					t.Fatal(err)
				}
			}
			app := filepath.Join(f.Dir, "app")
			admin := filepath.Join(app, ".git", "worktrees", "app")
			if crash == "in-register" {
				// makeAdmin got as far as HEAD: a locked registration
				// naming no folder yet, which git worktree prune keeps.
				for name, body := range map[string]string{"locked": "initializing\n", "commondir": "../..\n", "HEAD": "ref: refs/heads/" + w.Branch + "\n"} {
					os.MkdirAll(admin, 0o755)
					if err := os.WriteFile(filepath.Join(admin, name), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			r.lock.Unlock() // the owner dies
			st, err := OpenState(f.StateDir)
			if err != nil || len(st.Recovered) != 1 || st.Recovered[0] != r.ID() {
				t.Fatalf("recovery: %v %v", st.Recovered, err)
			}
			if _, err := os.Lstat(admin); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the half-made registration stayed: %v", err)
			}
			if ents, err := os.ReadDir(wdir); !errors.Is(err, os.ErrNotExist) {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Fatalf("the attempt's worktrees folder after recovery: %v %v", names, err)
			}
			if hits := grepTree(t, r.Dir, "app"); len(hits) > 0 {
				for _, h := range hits {
					if filepath.Base(h) == "README" {
						t.Fatalf("a checked out file stayed in the run's folder: %s", h)
					}
				}
			}
			if n, _ := filepath.Glob(filepath.Join(pool, "idle-*")); len(n) != 0 {
				t.Errorf("the taken tree went back to the pool: %v", n)
			}
			if out := testkit.GitRun(t, app, "worktree", "list"); strings.Count(out, "\n") != 0 {
				t.Errorf("worktrees left:\n%s", out)
			}
		})
	}
}
