package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/dispatch"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

type secrets map[string]string

func (s secrets) Get(k string) (string, error) {
	if v, ok := s[k]; ok {
		return v, nil
	}
	return "", os.ErrNotExist
}

type rig struct {
	srv *cluster.Server
	d   *dispatch.Dispatcher
	e   *factory.Engine
	ctx context.Context
}

// startServe starts serve's side: the embedded server, a dispatcher and
// an engine that sends every pool to workers.
func startServe(t *testing.T, yaml string, lostAfter time.Duration) *rig {
	t.Helper()
	f := testkit.Factory(t, yaml, "app")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := cluster.StartServer(cluster.ServerOptions{Dir: filepath.Join(f.StateDir, "cluster"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := srv.ServeEnrollments(ctx, nc); err != nil {
		t.Fatal(err)
	}
	h, err := cluster.Setup(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(ctx, dispatch.Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: srv.Dir, LostAfter: lostAfter})
	if err != nil {
		t.Fatal(err)
	}
	e, err := factory.New(f, factory.Options{Kusaw: "/bin/false", Remote: d, Secrets: secrets{"tok": "s3cr3t-value-42"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return &rig{srv: srv, d: d, e: e, ctx: ctx}
}

func (r *rig) startWorker(t *testing.T, name string) (*Worker, context.CancelFunc) {
	t.Helper()
	dir := t.TempDir()
	tok, err := r.srv.NewToken("", cluster.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(r.ctx, dir, tok.String(), name, "test", nil); err != nil {
		t.Fatal(err)
	}
	w, err := New(r.ctx, Options{StateDir: dir, Kusaw: "/bin/false", MaxParallel: 2, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; w.Close() })
	return w, cancel
}

const twoSteps = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [write, check]
steps:
  write:
    env:
      TOKEN: {secret: tok}
    run: [sh, -c, 'test "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" = e5bf47ca990f9d6d && echo from-worker > made.txt && mkdir -p "$KUSAW_ARTIFACTS" && echo report > "$KUSAW_ARTIFACTS/r.txt" && echo "out $TOKEN"']
  check:
    run: [sh, -c, 'grep -q from-worker made.txt && echo second >> made.txt']
`

// A run's attempts run on a worker that holds none of serve's paths: the
// secret reaches it sealed, its commits come back as bundles and land on
// the run branch, its logs and artifacts come back, serve writes
// attempt.json with the worker's name and sealed events that verify.
func TestRunOnWorker(t *testing.T) {
	r := startServe(t, twoSteps, 5*time.Second)
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State != status.RunSucceeded {
		for _, a := range atts {
			t.Logf("attempt %s/%d: %s %s %s", a.Step, a.Number, a.Outcome, a.Reason, a.Message)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	for _, a := range atts {
		if a.Worker != "w1" || a.Token == 0 {
			t.Errorf("attempt %s/%d: worker %q token %d", a.Step, a.Number, a.Worker, a.Token)
		}
	}
	repo := run.Record.Repos[0]
	got := testkit.GitRun(t, repo.Path, "show", repo.Branch+":made.txt")
	if got != "from-worker\nsecond" {
		t.Fatalf("run branch made.txt %q", got)
	}
	if n := testkit.GitRun(t, repo.Path, "rev-list", "--count", repo.Base+".."+repo.Branch); n != "2" && repo.Base != "" {
		t.Errorf("%s commits on the run branch", n)
	}
	dir := record.AttemptDir(run.Dir, "write", 1)
	if b, _ := os.ReadFile(filepath.Join(dir, record.StdoutFile)); !strings.Contains(string(b), "out ") || strings.Contains(string(b), "s3cr3t") {
		t.Errorf("stdout.log %q: the worker's output, redacted", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, record.ArtifactsDir, "r.txt")); string(b) != "report\n" {
		t.Errorf("artifact %q", b)
	}
	ev, err := os.ReadFile(filepath.Join(dir, record.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KUSAW_DEBUG_TIMES") != "" {
		for _, l := range strings.Split(string(ev), "\n") {
			var e record.Event
			if json.Unmarshal([]byte(l), &e) == nil && e.Type != "" {
				t.Logf("%s %s", e.TS.Format("15:04:05.000"), e.Type)
			}
		}
	}
	res, err := chainlog.Verify(bytes.NewReader(ev), r.e.PublicKey(), chainlog.Binding{Run: run.ID(), Step: "write", Attempt: 1, Kind: chainlog.KindEvents})
	if err != nil || res.Unsealed() != 0 {
		t.Fatalf("events: %v (%d unsealed)", err, res.Unsealed())
	}
	for _, want := range []string{`"type":"process.started"`, `"type":"cluster.claimed"`, `"worker":"w1"`} {
		if !strings.Contains(string(ev), want) {
			t.Errorf("events lack %s:\n%s", want, ev)
		}
	}
	// An honest worker sends only what a worker may: serve refuses none.
	if strings.Contains(string(ev), `"type":"`+record.EvClusterEventRefused+`"`) {
		t.Errorf("serve refused events of an honest worker:\n%s", ev)
	}
	// The secret is never in clear in serve's records or JetStream's store.
	for _, root := range []string{run.Dir, r.srv.Dir} {
		filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("s3cr3t-value-42")) {
					t.Errorf("the secret is in clear in %s", p)
				}
			}
			return nil
		})
	}
}

// Bundles are incremental against what the pool's workers hold; a worker
// whose cache lost a needed commit gets a full bundle on request.
func TestIncrementalBundles(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [edit]
steps:
  edit:
    run: [sh, -c, 'echo "$KUSAW_RUN" > edit.txt']
`, 5*time.Second)
	w, _ := r.startWorker(t, "w1")
	app := r.e.F.Repos["app"].Path
	bundles := func() []map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
		defer cancel()
		run, err := r.e.Run(ctx, "")
		if err != nil || run.Record.State != status.RunSucceeded {
			t.Fatalf("run: %v %+v", err, run.Record)
		}
		b, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, "edit", 1), record.EventsFile))
		var out []map[string]any
		for _, line := range strings.Split(string(b), "\n") {
			var ev record.Event
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "cluster.bundle" {
				out = append(out, ev.Data)
			}
		}
		return out
	}
	commit := func(msg string) {
		os.WriteFile(filepath.Join(app, msg), []byte(msg), 0o644)
		testkit.GitRun(t, app, "add", msg)
		testkit.GitRun(t, app, "commit", "-qm", msg)
	}
	if b := bundles(); len(b) != 1 || b[0]["full"] != true {
		t.Fatalf("first attempt: %v, want one full bundle", b)
	}
	// Let a heartbeat say what the cache holds.
	time.Sleep(2500 * time.Millisecond)
	commit("second")
	if b := bundles(); len(b) != 1 || b[0]["full"] != false {
		t.Fatalf("second attempt: %v, want an incremental bundle", b)
	}
	// The cache is lost; the heartbeat still names its commits.
	time.Sleep(2500 * time.Millisecond)
	if err := os.RemoveAll(filepath.Join(w.o.StateDir, cacheDir, "app")); err != nil {
		t.Fatal(err)
	}
	commit("third")
	b := bundles()
	if len(b) != 2 || b[0]["full"] != false || b[1]["full"] != true {
		t.Fatalf("after the cache was lost: %v, want the incremental bundle then a full one", b)
	}
}

// A worker's own secret store (kusaw config set --secret on its machine)
// wins over what serve sends.
func TestWorkerOwnSecretWins(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [s]
steps:
  s:
    env:
      TOKEN: {secret: tok}
    run: [sh, -c, 'test "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" = 612726ab48e460f8']
`, 5*time.Second)
	st, err := secretstore.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set("tok", "worker-own-value"); err != nil {
		t.Fatal(err)
	}
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil || run.Record.State != status.RunSucceeded {
		t.Fatalf("the step did not see the worker's own secret: %v %s %s", err, run.Record.State, run.Record.Message)
	}
}

// Canceling a run stops its remote attempt on the worker: the worker's
// process ends and the attempt is recorded canceled, with the worker named.
func TestCancelRemoteAttempt(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [long]
steps:
  long:
    run: [sh, -c, 'echo started; sleep 60']
`, 5*time.Second)
	w, _ := r.startWorker(t, "w1")
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan *factory.Run, 1)
	go func() {
		run, _ := r.e.Run(ctx, "")
		done <- run
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w.mu.Lock()
		n := len(w.running)
		w.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the attempt never reached the worker")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	cancel()
	var run *factory.Run
	select {
	case run = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end after cancel")
	}
	if time.Since(start) > 15*time.Second {
		t.Errorf("cancel took %s", time.Since(start))
	}
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State != status.RunCanceled || len(atts) != 1 || atts[0].Outcome != status.OutcomeCanceled || atts[0].Worker != "w1" {
		t.Fatalf("run %s, attempts %+v", run.Record.State, atts)
	}
}

// A retry runs on a worker too: its handoff (the previous attempt's
// outcome and output tails) travels in the spec and the worker lays it
// out in a folder of its own.
func TestRetryHandoffOnWorker(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [flaky]
steps:
  flaky:
    attempts: 2
    run: [sh, -c, 'if [ -z "$KUSAW_PREVIOUS_OUTCOME" ]; then echo first-try-output; exit 3; fi; test "$KUSAW_PREVIOUS_OUTCOME" = failed && test "$KUSAW_PREVIOUS_EXIT_CODE" = 3 && grep -q first-try-output "$KUSAW_PREVIOUS_DIR"/stdout.log.tail && grep -q outcome=failed "$KUSAW_PREVIOUS_DIR"/outcome && echo fixed > fixed.txt']
`, 5*time.Second)
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State != status.RunSucceeded || len(atts) != 2 {
		sb, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, "flaky", 2), record.SpecFile))
		t.Logf("spec of the retry: %s", sb)
		for _, a := range atts {
			t.Logf("attempt %d on %q: %s %s", a.Number, a.Worker, a.Outcome, a.Message)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	for _, a := range atts {
		if a.Worker != "w1" {
			t.Errorf("attempt %d ran on %q, want the worker", a.Number, a.Worker)
		}
	}
	b, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, "flaky", 2), record.SpecFile))
	if strings.Contains(string(b), run.Dir) || !strings.Contains(string(b), record.HandoffPlaceholder) {
		t.Errorf("the retry's spec names serve's folders or lacks the handoff:\n%s", b)
	}
}

// A fix loop runs on the worker: the fixer starts from the failed
// attempt's branch, the next attempt from the fixer's, and the run branch
// ends with all of it.
func TestFixLoopOnWorker(t *testing.T) {
	r := startServe(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [build]
steps:
  build:
    attempts: 2
    on_failure: fixer
    run: [sh, -c, 'test -f fixed.txt || { echo broken > broken.txt; exit 1; }']
  fixer:
    run: [sh, -c, 'test -f broken.txt && echo ok > fixed.txt']
`, 5*time.Second)
	r.startWorker(t, "w1")
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	for _, a := range atts {
		if a.Worker != "w1" {
			t.Errorf("attempt %s/%d ran on %q, want the worker", a.Step, a.Number, a.Worker)
		}
	}
	var fixer record.AttemptRecord
	if b, err := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, "fixer", 1), record.AttemptFile)); err != nil || json.Unmarshal(b, &fixer) != nil {
		t.Fatalf("the fixer's attempt.json: %v", err)
	}
	if fixer.Worker != "w1" || fixer.Outcome != status.OutcomePassed {
		t.Errorf("fixer: worker %q outcome %s", fixer.Worker, fixer.Outcome)
	}
	if run.Record.State != status.RunSucceeded || len(atts) != 2 {
		for _, a := range atts {
			t.Logf("attempt %s/%d on %q: %s %s", a.Step, a.Number, a.Worker, a.Outcome, a.Message)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
	repo := run.Record.Repos[0]
	for _, f := range []string{"broken.txt", "fixed.txt"} {
		testkit.GitRun(t, repo.Path, "cat-file", "-e", repo.Branch+":"+f)
	}
}
