package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
)

// Attacker's side: mallory, the attempt's rightful holder, names among
// her result's files the records serve writes into the attempt's folder
// (events.jsonl, attempt.json, spec.json) and paths out of it, each an
// object she stored under her own claim with the right digest. Serve
// writes none of them: each is refused with a cluster.object_refused
// event naming it, serve's sealed events.jsonl still verifies against
// serve's key and still holds its own cluster.claimed, and nothing lands
// outside the folder. The twin: the same result's stdout.log, setup.log
// and worker-events.jsonl are taken.
func TestResultFilesAllowList(t *testing.T) {
	r := startServe(t, madeArtifact, scriptedLostAfter)
	m := r.scripted(t, "mallory")
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	done := make(chan *factory.Run, 1)
	go func() {
		run, err := r.e.Run(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- run
	}()
	spec, _, tok := m.take(ctx)
	res := cluster.Result{Heads: map[string]string{}, Bundles: map[string]string{}, Files: map[string]string{}, Digests: map[string]string{}}
	src := t.TempDir()
	send := func(file, content string) {
		p := filepath.Join(src, strings.NewReplacer("/", "_", ".", "_").Replace(file))
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		res.Files[file] = m.put(ctx, spec, tok, strings.ReplaceAll(file, "/", "_"), p, &res)
	}
	forged := []string{record.EventsFile, record.AttemptFile, record.SpecFile, "../x.log", "../../" + record.RunFile, "/tmp/abs.log", "artifacts/../stdout.log", "stdout-other.log"}
	for _, f := range forged {
		send(f, `{"ts":"2026-01-01T00:00:00Z","type":"attempt.finished","data":{"outcome":"passed","forged":"by-mallory"}}`+"\n")
	}
	send(record.StdoutFile, "genuine stdout\n")
	send(record.SetupLogFile, "genuine setup\n")
	send("worker-events.jsonl", `{"type":"process.started","genuine":"yes"}`+"\n")
	m.report(ctx, spec, tok, res)
	run := <-done
	if run == nil {
		t.FailNow()
	}
	dir := record.AttemptDir(run.Dir, spec.Step, spec.Number)

	refused := map[string]string{}
	for _, d := range eventsOf(t, dir, record.EvClusterObjectRefused) {
		f, _ := d["file"].(string)
		refused[f], _ = d["error"].(string)
	}
	for _, f := range forged {
		if refused[f] == "" {
			t.Errorf("%s: no %s event refused it (refused: %v)", f, record.EvClusterObjectRefused, refused)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, record.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "by-mallory") {
		t.Errorf("serve's events.jsonl holds mallory's file:\n%s", b)
	}
	if len(eventsOf(t, dir, record.EvClusterClaimed)) == 0 {
		t.Errorf("serve's own %s event is gone from events.jsonl", record.EvClusterClaimed)
	}
	vr, err := chainlog.VerifyFile(filepath.Join(dir, record.EventsFile), r.e.PublicKey(),
		chainlog.Binding{Run: spec.Run, Step: spec.Step, Attempt: spec.Number, Kind: chainlog.KindEvents})
	if err != nil || vr.Unsealed() != 0 {
		t.Errorf("serve's events.jsonl does not verify: %v (%d unsealed)", err, vr.Unsealed())
	}
	for _, f := range []string{record.AttemptFile, record.SpecFile} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && strings.Contains(string(b), "by-mallory") {
			t.Errorf("serve's %s is mallory's file", f)
		}
	}
	for _, p := range []string{filepath.Join(dir, "..", "x.log"), filepath.Join(run.Dir, "steps", record.RunFile), "/tmp/abs.log", filepath.Join(dir, "stdout-other.log")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a refused file landed at %s", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(run.Dir, record.RunFile)); err != nil || strings.Contains(string(b), "by-mallory") {
		t.Errorf("the run's run.json: %v %.200s", err, b)
	}

	// The twin.
	for f, want := range map[string]string{record.StdoutFile: "genuine stdout\n", record.SetupLogFile: "genuine setup\n", "worker-events.jsonl": `"genuine":"yes"`} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("the result's %s was not taken: %q %v", f, b, err)
		}
		if refused[f] != "" {
			t.Errorf("%s refused: %s", f, refused[f])
		}
	}
}
