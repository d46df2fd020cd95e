package dispatch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/record"
)

// A result without a digest for an object it names is a mismatch, like a
// wrong one; the right one passes.
func TestDigestMatches(t *testing.T) {
	sum := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	r := cluster.Result{Worker: "w1", Digests: map[string]string{"a/1/stdout.log": sum, "a/1/empty": ""}}
	for _, obj := range []string{"a/1/stderr.log", "a/1/empty"} {
		if err := digestMatches(r, obj, sum); err == nil {
			t.Errorf("%s: no digest, accepted", obj)
		}
	}
	if err := digestMatches(r, "a/1/stdout.log", sum[:63]+"0"); err == nil {
		t.Error("a wrong digest accepted")
	}
	if err := digestMatches(r, "a/1/stdout.log", sum); err != nil {
		t.Errorf("the right digest: %v", err)
	}
}

// A fetched file never takes the place of one in the attempt's folder
// (serve's records): placeNew refuses an existing name and leaves it
// whole; a new name is placed readable.
func TestPlaceNewNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	own, part := filepath.Join(dir, "events.jsonl"), filepath.Join(dir, "x.part")
	os.WriteFile(own, []byte("serve's"), 0o644)
	os.WriteFile(part, []byte("worker's"), 0o600)
	if err := placeNew(part, own); err == nil {
		t.Fatal("placed over an existing file")
	}
	if b, _ := os.ReadFile(own); string(b) != "serve's" {
		t.Fatalf("the existing file is now %q", b)
	}
	os.WriteFile(part, []byte("worker's"), 0o600)
	dst := filepath.Join(dir, "stdout.log")
	if err := placeNew(part, dst); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("placed file: %v %v", fi, err)
	}
	if _, err := os.Stat(part); err == nil {
		t.Error("the part file stayed")
	}
}

// A worker that sends many types serve refuses gets each recorded once,
// up to maxRefusedTypes, and none written; its own types pass.
func TestFromWorkerRefusals(t *testing.T) {
	var emitted []string
	a := &waiting{job: record.RemoteJob{Emit: func(typ string, data map[string]any) {
		if typ != record.EvClusterEventRefused || data["worker"] != "mallory" {
			t.Errorf("emitted %s %v", typ, data)
		}
		emitted = append(emitted, data["type"].(string))
	}}}
	for i := 0; i < 3; i++ {
		if a.fromWorker(cluster.Event{Worker: "mallory", Type: record.EvRunFinished}, 7) {
			t.Error("run.finished from a worker written")
		}
	}
	for i := 0; i < 2*maxRefusedTypes; i++ {
		if a.fromWorker(cluster.Event{Worker: "mallory", Type: fmt.Sprintf("zzz.new%d", i)}, 8) {
			t.Errorf("zzz.new%d from a worker written", i)
		}
	}
	if len(emitted) != maxRefusedTypes || emitted[0] != record.EvRunFinished {
		t.Errorf("refusals recorded: %v", emitted)
	}
	for _, typ := range []string{record.EvProcessStarted, record.EvProviderTool, record.EvEgressBlocked} {
		if !a.fromWorker(cluster.Event{Worker: "mallory", Type: typ}, 9) {
			t.Errorf("%s from a worker refused", typ)
		}
	}
}
