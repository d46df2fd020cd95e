package record

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/status"
)

// A run that just ended names its events' last seal a moment after its
// final state (its notifications come between): AwaitRunSeal waits for it,
// so that log verify does not call the run's record edited.
func TestAwaitRunSealWaitsForTheSeal(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	write := func(r RunRecord) {
		b, _ := json.Marshal(r)
		// Replaced at once, as serve writes it.
		tmp := filepath.Join(dir, RunFile+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil || os.Rename(tmp, filepath.Join(dir, RunFile)) != nil {
			t.Error("writing run.json")
		}
	}
	r := RunRecord{ID: "20261202-000000-abcd", State: status.RunSucceeded, Finished: &now}
	write(r)
	go func() {
		time.Sleep(200 * time.Millisecond)
		r.EventsSeal = &chainlog.SealRef{Line: 7}
		write(r)
	}()
	AwaitRunSeal(dir)
	var got RunRecord
	b, _ := os.ReadFile(filepath.Join(dir, RunFile))
	if json.Unmarshal(b, &got) != nil || got.EventsSeal == nil || got.EventsSeal.Line != 7 {
		t.Fatalf("AwaitRunSeal returned before the seal was written: %s", b)
	}
}
