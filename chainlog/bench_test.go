package chainlog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAppend compares Append (chain, a seal every 100 lines) with
// writing the same record as a plain JSON line, in one run, and
// reports the ratio. Run: go test -run '^$' -bench Append ./chainlog/
func BenchmarkAppend(b *testing.B) {
	key := newKey(b)
	rec := event{Seq: 1, Type: "egress.decision", Data: map[string]any{"host": "registry.npmjs.org", "port": 443, "decision": "allow", "bytes_up": 1234, "bytes_down": 56789}}
	dir := b.TempDir()
	w, err := Create(filepath.Join(dir, "chain"), key, Options{Binding: attEgress, SealInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	plain, err := os.OpenFile(filepath.Join(dir, "plain"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	var tChain, tPlain time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		line, _ := json.Marshal(rec)
		plain.Write(append(line, '\n'))
		tPlain += time.Since(start)
		start = time.Now()
		if err := w.Append(rec); err != nil {
			b.Fatal(err)
		}
		tChain += time.Since(start)
	}
	b.StopTimer()
	w.Close()
	plain.Close()
	b.ReportMetric(float64(tChain.Nanoseconds())/float64(b.N), "chain-ns/line")
	b.ReportMetric(float64(tPlain.Nanoseconds())/float64(b.N), "plain-ns/line")
	b.ReportMetric(float64(tChain)/float64(tPlain), "ratio")
}

// BenchmarkCheckpoint is the cost of an event that changes state: a line
// and a seal at once (the sign; fsyncs at most every SyncInterval).
func BenchmarkCheckpoint(b *testing.B) {
	key := newKey(b)
	rec := event{Seq: 1, Type: "attempt.finished", Data: map[string]any{"outcome": "passed", "exit_code": 0}}
	w, err := Create(filepath.Join(b.TempDir(), "chain"), key, Options{Binding: attEvents, SealInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Append(rec); err != nil {
			b.Fatal(err)
		}
		if err := w.Seal(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	w.Close()
}
