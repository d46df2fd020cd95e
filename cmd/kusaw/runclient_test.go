package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// fakeServe answers kusaw run's requests on a state folder's socket:
// Submit waits for release, and the run ids canceled are recorded.
type fakeServe struct {
	release  chan struct{}
	mu       sync.Mutex
	canceled []string
	refuse   string // an API error code Submit answers with
}

func (f *fakeServe) start(t *testing.T) string {
	t.Helper()
	state, err := os.MkdirTemp("", "kusaw-runclient-") // short: a socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	sock := filepath.Join(state, record.ServeSocketFile)
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		if f.refuse != "" {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"code":"` + f.refuse + `","message":"no pipeline \"nope\" in factory.yaml"}}`))
			return
		}
		<-f.release
		w.Write([]byte(`{"run":{"id":"r1","state":"queued"}}`))
	})
	mux.HandleFunc("POST /v1/runs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.canceled = append(f.canceled, r.PathValue("id"))
		f.mu.Unlock()
		w.Write([]byte(`{"run":{"id":"r1","state":"running"}}`))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return state
}

// A signal that comes while serve is still taking the run is not lost:
// the run is canceled as soon as it has an id, once.
func TestServeRunCancelBeforeItsID(t *testing.T) {
	f := &fakeServe{release: make(chan struct{})}
	c, err := client.DialServe(f.start(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &serveRun{c: c, onEvent: func(record.Event) {}}
	started := make(chan error, 1)
	go func() { started <- s.Start("default", nil) }()
	s.Cancel() // Submit has not answered: there is no id yet
	f.mu.Lock()
	early := len(f.canceled)
	f.mu.Unlock()
	close(f.release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if early != 0 || len(f.canceled) != 1 || f.canceled[0] != "r1" {
		t.Fatalf("cancel requests %v (%d before the id)", f.canceled, early)
	}
}

// serve's refusal of a pipeline it does not have is a usage error, as the
// engine's is in-process.
func TestServeRunUnknownPipelineIsUsage(t *testing.T) {
	f := &fakeServe{release: make(chan struct{}), refuse: "unknown_pipeline"}
	c, err := client.DialServe(f.start(t))
	if err != nil {
		t.Fatal(err)
	}
	err = (&serveRun{c: c}).Start("nope", nil)
	if exitCode(err) != status.ExitUsage || errMessage(err) != `no pipeline "nope" in factory.yaml` {
		t.Fatalf("%v: exit %d", err, exitCode(err))
	}
}
