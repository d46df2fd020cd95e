package record

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kusaw/kusaw/chainlog"
)

// LogKind is the kind of chained log a file name holds: events.jsonl or
// egress.log; "" for any other name.
func LogKind(name string) string {
	switch name {
	case EventsFile:
		return chainlog.KindEvents
	case EgressLogFile:
		return chainlog.KindEgress
	}
	return ""
}

// LogPlace reads which log a path is from its place in a state directory:
// runs/RUN/events.jsonl, or runs/RUN/steps/STEP/N/events.jsonl or
// egress.log. ok is false for a path that is not such a place; runDir is
// the run's folder.
func LogPlace(path string) (b chainlog.Binding, runDir string, ok bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return b, "", false
	}
	kind := LogKind(filepath.Base(abs))
	if kind == "" {
		return b, "", false
	}
	dir := filepath.Dir(abs)
	// The run's own events: runs/RUN/events.jsonl.
	if kind == chainlog.KindEvents && filepath.Base(filepath.Dir(dir)) == RunsDir {
		return chainlog.Binding{Run: filepath.Base(dir), Kind: kind}, dir, true
	}
	// An attempt's: runs/RUN/steps/STEP/N/<file>.
	n, err := strconv.Atoi(filepath.Base(dir))
	stepDir := filepath.Dir(dir)
	steps := filepath.Dir(stepDir)
	runDir = filepath.Dir(steps)
	if err != nil || n < 1 || filepath.Base(steps) != StepsDir || filepath.Base(filepath.Dir(runDir)) != RunsDir {
		return b, "", false
	}
	return chainlog.Binding{Run: filepath.Base(runDir), Step: filepath.Base(stepDir), Attempt: n, Kind: kind}, runDir, true
}

// sealGrace is how long after a run's end its owner may still be writing
// the events' last seal into run.json: the run's notifications have their
// first try (up to 6 s) between the final state and the seal.
const sealGrace = 10 * time.Second

// AwaitRunSeal waits while runDir's run ended less than sealGrace ago and
// its run.json names no last seal yet, until it names one: a log verified
// in that moment would be found edited (CheckRunSeal). Any other record
// returns at once.
func AwaitRunSeal(runDir string) {
	for {
		var r RunRecord
		b, err := os.ReadFile(filepath.Join(runDir, RunFile))
		if err != nil || json.Unmarshal(b, &r) != nil || r.EventsSeal != nil || !r.State.Final() || r.Finished == nil || time.Since(*r.Finished) > sealGrace {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CheckRunSeal compares a run's verified events log with the last seal its
// run.json names: a log cut back to an earlier seal (a resumed run's first
// final seal) no longer holds it. A run that ended must name one.
func CheckRunSeal(runDir string, res chainlog.Result) error {
	b, err := os.ReadFile(filepath.Join(runDir, RunFile))
	if err != nil {
		return fmt.Errorf("cannot read the run's %s to check the log's last seal: %v", RunFile, err)
	}
	var r RunRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("the run's %s is damaged: %v", RunFile, err)
	}
	if r.EventsSeal == nil {
		if r.State.Final() {
			return fmt.Errorf("the run ended (%s) but its %s names no last seal of its events (it was edited)", r.State, RunFile)
		}
		return nil
	}
	if !res.HasSeal(*r.EventsSeal) {
		return fmt.Errorf("%s names the events' last seal at line %d, which this log (%d lines) does not hold: the log was cut back or replaced", RunFile, r.EventsSeal.Line, res.Lines)
	}
	return nil
}
