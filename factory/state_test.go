package factory

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/status"
)

func writeRun(t *testing.T, st *State, rec RunRecord) {
	t.Helper()
	dir := st.RunDir(rec.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(dir, runFile), &rec); err != nil {
		t.Fatal(err)
	}
}

func TestStateRunsAndIDs(t *testing.T) {
	st, err := OpenState(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"20261130-031500-ab12", "20261130-031501-cd34", "20261129-235959-0000"} {
		writeRun(t, st, RunRecord{ID: id, Pipeline: "default", State: status.RunSucceeded, Created: time.Now()})
	}
	os.MkdirAll(st.RunDir("20261130-040000-half"), 0o755) // a folder without a record yet
	runs, err := st.Runs()
	if err != nil || len(runs) != 3 || runs[0].ID != "20261130-031501-cd34" || runs[2].ID != "20261129-235959-0000" {
		t.Fatalf("runs newest first: %v %v", runs, err)
	}
	if r, err := st.LoadRun("20261129"); err != nil || r.ID != "20261129-235959-0000" {
		t.Errorf("unique prefix: %v %v", r, err)
	}
	if _, err := st.LoadRun("20261130-0315"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	for _, bad := range []string{"nope", "", "../x", ".."} {
		if _, err := st.LoadRun(bad); !errors.Is(err, ErrNoRun) {
			t.Errorf("LoadRun(%q): %v", bad, err)
		}
	}
	if _, err := st.RequestCancel("20261130-031500-ab12"); err == nil {
		t.Error("canceling a finished run succeeded")
	}
}

func TestRecoverySkipsRunsWithLiveOwner(t *testing.T) {
	st, _ := OpenState(t.TempDir())
	rec := RunRecord{ID: "20261130-031500-live", State: status.RunRunning, Created: time.Now()}
	writeRun(t, st, rec)
	l, ok, err := tryLock(filepath.Join(st.RunDir(rec.ID), lockFile))
	if err != nil || !ok {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(st.Dir, activeDir, rec.ID), nil, 0o644)
	again, _ := OpenState(st.Dir)
	if got, _ := again.LoadRun(rec.ID); got.State != status.RunRunning || len(again.Recovered) != 0 {
		t.Fatalf("a run whose owner holds its lock was recovered: %v", got.State)
	}
	l.Unlock()
	again, _ = OpenState(st.Dir)
	if got, _ := again.LoadRun(rec.ID); got.State != status.RunInterrupted || got.Reason != status.ReasonRunInterrupted {
		t.Fatalf("after the owner let go: %v", got.State)
	}
	if _, err := os.Stat(filepath.Join(st.Dir, activeDir, rec.ID)); err == nil {
		t.Error("the active marker stayed")
	}
}
