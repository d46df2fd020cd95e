package worker

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/status"
)

const artifactsOfSize = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [small, big]
steps:
  small:
    run: [sh, -c, 'mkdir -p "$KUSAW_ARTIFACTS" && head -c 20000 /dev/urandom > "$KUSAW_ARTIFACTS/small.bin" && echo small > small.txt']
  big:
    run: [sh, -c, 'mkdir -p "$KUSAW_ARTIFACTS" && head -c 400000 /dev/urandom > "$KUSAW_ARTIFACTS/big.bin" && echo big > big.txt']
`

// Attacker's side: a worker's attempt makes more than the object store
// may hold. Its upload is refused and the attempt fails, saying the store
// is full (no branch moves); serve's disk holds no more than the limit.
// The twin: the attempt before it, whose results fit, succeeds and its
// artifacts come back.
func TestObjectStoreFullFailsAttempt(t *testing.T) {
	r := startServe(t, artifactsOfSize, 30*time.Second)
	nc, err := r.srv.ConnectInProcess("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const limit = 256 << 10
	h, err := cluster.SetupWith(r.ctx, nc, cluster.SetupOptions{ObjectsMaxBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	var small, big string
	for _, a := range atts {
		t.Logf("attempt %s/%d: %s %s", a.Step, a.Number, a.Outcome, a.Message)
		switch a.Step {
		case "small":
			small = string(a.Outcome)
		case "big":
			big = a.Message
		}
	}
	if run.Record.State == status.RunSucceeded || small != string(status.OutcomePassed) {
		t.Fatalf("run %s, small %q", run.Record.State, small)
	}
	if !strings.Contains(big, "object store is full") || !strings.Contains(big, "KUSAW_OBJECTS") {
		t.Fatalf("the big attempt's message does not say the store is full: %q", big)
	}
	st, err := h.JS.Stream(ctx, cluster.ObjectsStream("default"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Bytes > limit {
		t.Fatalf("the object store holds %+v, past its limit %d (%v)", info, limit, err)
	}
	repo := run.Record.Repos[0]
	if err := exec.Command("git", "-C", repo.Path, "cat-file", "-e", repo.Branch+":big.txt").Run(); err == nil {
		t.Error("the failed attempt's commit reached the run branch")
	}
}
