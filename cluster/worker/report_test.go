package worker

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/dispatch"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/nats-io/nats.go/jetstream"
)

// serve's NATS server goes away while a worker's attempt runs and stays
// away past one try: the finished attempt's uploads and result are tried
// again, and reach the stream once a server is back on the same address
// and store (what a restarted serve re-attaches to).
func TestReportWaitsForServe(t *testing.T) { serverGoesAway(t, true) }

// The server goes away right after the claim, while the worker fetches
// the attempt's code: the fetch lost with the old connection starts again
// once a server is back, instead of waiting for ever, and the attempt runs.
func TestFetchSurvivesServeRestart(t *testing.T) { serverGoesAway(t, false) }

func serverGoesAway(t *testing.T, afterStart bool) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [nap]
steps:
  nap:
    run: [sh, -c, 'sleep 2; echo rested > rested.txt']
`, "app")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := filepath.Join(f.StateDir, "cluster")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := cluster.StartServer(cluster.ServerOptions{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeEnrollments(ctx, nc); err != nil {
		t.Fatal(err)
	}
	h, err := cluster.Setup(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(ctx, dispatch.Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: dir, LostAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e, err := factory.New(f, factory.Options{Kusaw: "/bin/false", Remote: d})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := &rig{srv: srv, d: d, e: e, ctx: ctx}
	var logs logLines
	fetching, resume := make(chan struct{}), make(chan struct{})
	prep := func(w *Worker) {
		if !afterStart {
			w.h.Objects = heldGet{ObjectStore: w.h.Objects, fetching: fetching, resume: resume}
		}
	}
	w, _ := r.startWorkerWith(t, "w1", Options{TryTimeout: 300 * time.Millisecond, MaxParallel: 1, Logf: logs.logf}, prep)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go func() { _, _ = e.Run(rctx, "") }()
	var id string
	waitUntil(t, "the worker runs the attempt", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for k := range w.running {
			id = k
		}
		return id != ""
	})
	// The step's process runs on the worker (its code and secrets were
	// fetched): now serve goes, and the step goes on.
	run, _, _ := strings.Cut(id, "/")
	if !afterStart {
		<-fetching // the code's fetch is under way
	}
	waitUntil(t, "the step's process to start", func() bool {
		if !afterStart {
			return true
		}
		var a record.AttemptRecord
		b, err := os.ReadFile(filepath.Join(w.runDir(run), record.StepsDir, "nap", "1", record.AttemptFile))
		return err == nil && json.Unmarshal(b, &a) == nil && len(a.Processes) > 0 && a.Processes[0].PID > 0
	})
	nc.Close()
	srv.Shutdown()
	close(resume)
	waitUntil(t, "the worker to try again", func() bool { return len(logs.with("trying again")) > 0 }, &logs)

	srv2, err := cluster.StartServer(cluster.ServerOptions{Dir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Shutdown()
	nc2, err := srv2.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js, _ := jetstream.New(nc2)
	var res cluster.Result
	waitUntil(t, "the result in the events stream", func() bool {
		st, err := js.Stream(ctx, cluster.EventsStream)
		if err != nil {
			return false
		}
		m, err := st.GetLastMsgForSubject(ctx, cluster.ResultSubject(cluster.Key(id), "w1"))
		return err == nil && json.Unmarshal(m.Data, &res) == nil
	})
	if res.Error != "" || res.Bundles["app"] == "" || len(res.Digests) == 0 {
		t.Fatalf("the report after the outage: %+v (worker: %q)", res, logs.with(""))
	}
	o, err := cluster.Open(ctx, nc2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.GetBytes(ctx, res.Bundles["app"]); err != nil {
		t.Errorf("the bundle the report names is not stored: %v", err)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool, logs ...*logLines) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			for _, l := range logs {
				t.Logf("worker: %q", l.with(""))
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// heldGet holds the first object fetch open, once it has begun, until
// resume: serve's server goes away in the middle of it.
type heldGet struct {
	cluster.ObjectStore
	fetching, resume chan struct{}
}

func (h heldGet) Get(ctx context.Context, name string) (io.ReadCloser, cluster.ObjectInfo, error) {
	res, info, err := h.ObjectStore.Get(ctx, name)
	select {
	case <-h.fetching:
		return res, info, err // only the first
	default:
	}
	close(h.fetching)
	<-h.resume
	return res, info, err
}
