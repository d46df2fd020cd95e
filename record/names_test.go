package record

import (
	"path/filepath"
	"testing"

	"github.com/kusaw/kusaw/chainlog"
)

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "build", "20261201-120000-abcd", "a.b", "A_b-c", "x..y"} {
		if !ValidName(ok) {
			t.Errorf("ValidName(%q) = false", ok)
		}
	}
	long := make([]byte, MaxNameLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", `a\b`, "a\x00", ".hidden", "-x", "_x", "a b", "é", string(long)} {
		if ValidName(bad) {
			t.Errorf("ValidName(%q) = true", bad)
		}
	}
}

func TestLogPlace(t *testing.T) {
	state := filepath.Join(t.TempDir(), ".kusaw")
	for p, want := range map[string]chainlog.Binding{
		filepath.Join(state, "runs", "R1", "events.jsonl"):                        {Run: "R1", Kind: chainlog.KindEvents},
		filepath.Join(state, "runs", "R1", "steps", "build", "2", "events.jsonl"): {Run: "R1", Step: "build", Attempt: 2, Kind: chainlog.KindEvents},
		filepath.Join(state, "runs", "R1", "steps", "build", "2", "egress.log"):   {Run: "R1", Step: "build", Attempt: 2, Kind: chainlog.KindEgress},
	} {
		b, runDir, ok := LogPlace(p)
		if !ok || b != want || runDir != filepath.Join(state, "runs", "R1") {
			t.Errorf("LogPlace(%s) = %+v %s %v, want %+v", p, b, runDir, ok, want)
		}
	}
	for _, p := range []string{
		filepath.Join(state, "runs", "R1", "run.json"),
		filepath.Join(state, "events.jsonl"),
		filepath.Join(state, "runs", "R1", "egress.log"),
		filepath.Join(state, "runs", "R1", "steps", "build", "x", "egress.log"),
		filepath.Join(state, "runs", "R1", "steps", "build", "0", "egress.log"),
		filepath.Join(t.TempDir(), "copy", "events.jsonl"),
	} {
		if b, _, ok := LogPlace(p); ok {
			t.Errorf("LogPlace(%s) = %+v, want no place", p, b)
		}
	}
}
