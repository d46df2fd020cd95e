package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// serveFactory writes a factory with one repo and the given steps and
// pipelines, and loads it.
func serveFactory(t *testing.T, body string) *config.Factory {
	t.Helper()
	testkit.NeedGit(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "app")
	for _, args := range [][]string{{"init", "-q", "-b", "main", repo}, {"-C", repo, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	p := filepath.Join(dir, "factory.yaml")
	if err := os.WriteFile(p, []byte("version: 1\nrepos:\n  app:\n    path: app\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	f, fs, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if errs := fs.Errors(); len(errs) > 0 {
		t.Fatalf("factory: %v", errs[0].String())
	}
	return f
}

// startServer runs a Server until the test ends and returns a client of
// its socket.
func startServer(t *testing.T, f *config.Factory, opts ServeOptions) (*Server, *client.Client, func()) {
	t.Helper()
	opts.Engine.KillGrace = time.Second
	opts.Engine.CancelPoll = 20 * time.Millisecond
	opts.Log = zerolog.New(io.Discard)
	s, err := NewServer(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	var c *client.Client
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err = client.DialServe(f.StateDir)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return s, c, stop
}

func waitRun(t *testing.T, c *client.Client, id string, d time.Duration) *client.RunDetail {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		det, err := c.Detail(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if det.Run.State.Final() {
			return det
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %s", id, det.Run.State, d)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func TestServeQueueRespectsLimit(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [a, b]
steps:
  a:
    run: [sh, -c, "sleep 0.2"]
  b:
    run: [sh, -c, "echo $KUSAW_PARAM_COLOR > $KUSAW_ARTIFACTS/color"]
`)
	s, c, _ := startServer(t, f, ServeOptions{MaxParallel: 2})
	ctx := context.Background()
	var ids []string
	for i := 0; i < 6; i++ {
		rec, err := c.Submit(ctx, "", map[string]string{"COLOR": "blue"})
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != status.RunQueued {
			t.Fatalf("submitted run is %s, want queued", rec.State)
		}
		ids = append(ids, rec.ID)
	}
	var all []*record.AttemptRecord
	for _, id := range ids {
		d := waitRun(t, c, id, 60*time.Second)
		if d.Run.State != status.RunSucceeded || d.ExitCode != status.ExitOK {
			t.Fatalf("run %s: %s (%s), exit %d", id, d.Run.State, d.Run.Message, d.ExitCode)
		}
		all = append(all, d.Attempts...)
		b, err := os.ReadFile(filepath.Join(s.E.State.AttemptDir(id, "b", 1), "artifacts", "color"))
		if err != nil || strings.TrimSpace(string(b)) != "blue" {
			t.Fatalf("the run's parameter did not reach its step: %q %v", b, err)
		}
	}
	if len(all) != 12 {
		t.Fatalf("want 12 attempts, got %d", len(all))
	}
	if got := record.MaxOverlap(all); got > 2 {
		t.Fatalf("%d attempts ran at once with max_parallel 2", got)
	}
	// Six runs of 0.2s with two slots: the limit was used, not just obeyed.
	if s.Peak() != 2 {
		t.Fatalf("peak running runs = %d, want 2", s.Peak())
	}
}

func TestServeCancelQueuedAndRunning(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [slow]
steps:
  slow:
    run: [sh, -c, "sleep 30"]
`)
	_, c, _ := startServer(t, f, ServeOptions{MaxParallel: 1})
	ctx := context.Background()
	first, err := c.Submit(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Submit(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The second waits for the only slot: canceling it never starts it.
	if _, err := c.CancelCtx(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	d := waitRun(t, c, second.ID, 10*time.Second)
	if d.Run.State != status.RunCanceled || len(d.Attempts) != 0 || d.ExitCode != status.ExitInterrupted {
		t.Fatalf("queued run after cancel: %s, %d attempts, exit %d", d.Run.State, len(d.Attempts), d.ExitCode)
	}
	// The first is running its step: wait for the process, then cancel.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, _ = c.Detail(ctx, first.ID)
		if len(d.Attempts) == 1 && len(d.Attempts[0].Processes) == 1 && d.Attempts[0].Processes[0].PID > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run's step never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.CancelCtx(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	d = waitRun(t, c, first.ID, 10*time.Second)
	if d.Run.State != status.RunCanceled || d.Attempts[0].Outcome != status.OutcomeCanceled {
		t.Fatalf("running run after cancel: %s, attempt %s", d.Run.State, d.Attempts[0].Outcome)
	}
	// A second cancel is a conflict with a code, not a crash.
	_, err = c.CancelCtx(ctx, first.ID)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "run_ended" {
		t.Fatalf("cancel of an ended run: %v", err)
	}
}

func TestServeEventsStream(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [a, b]
steps:
  a:
    run: [sh, -c, "sleep 0.3"]
  b:
    run: [sh, -c, "exit 3"]
`)
	_, c, _ := startServer(t, f, ServeOptions{MaxParallel: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := c.Submit(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	state, err := c.Follow(ctx, rec.ID, func(ev record.Event) { types = append(types, ev.Type) })
	if err != nil {
		t.Fatal(err)
	}
	if state != string(status.RunFailed) {
		t.Fatalf("stream ended with state %q", state)
	}
	want := []string{record.EvRunStarted, record.EvStepStarted, record.EvAttemptStarted, record.EvAttemptFinished, record.EvStepFinished, record.EvStepStarted, record.EvAttemptStarted, record.EvAttemptFinished, record.EvStepFinished, record.EvRunFinished}
	var got []string
	for _, ty := range types {
		for _, w := range want {
			if ty == w {
				got = append(got, ty)
				break
			}
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events in order:\n got %v\nwant %v", got, want)
	}
	// Following a finished run replays it and ends.
	var again int
	if _, err := c.Follow(ctx, rec.ID, func(record.Event) { again++ }); err != nil || again != len(types) {
		t.Fatalf("replay: %d events (want %d), %v", again, len(types), err)
	}
	d, _ := c.Detail(ctx, rec.ID)
	if d.ExitCode != status.ExitRunFailed {
		t.Fatalf("exit code %d, want 1", d.ExitCode)
	}
}

// rawCall sends a request over the socket and returns status and body.
func rawCall(t *testing.T, sock, method, path, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: body is not JSON: %q", method, path, b)
	}
	return resp.StatusCode, m
}

func TestServeBadRequestsGetJSONErrors(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [a]
steps:
  a:
    run: [sh, -c, "true"]
`)
	_, c, _ := startServer(t, f, ServeOptions{MaxParallel: 1})
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	cases := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/runs", "{not json", 400, "bad_request"},
		{"POST", "/v1/runs", `{"pipeline":"nope"}`, 400, "unknown_pipeline"},
		{"POST", "/v1/runs", `{"pipelin":"default"}`, 400, "bad_request"},
		{"POST", "/v1/runs", `{"params":{"A-B":"x"}}`, 400, "bad_params"},
		{"POST", "/v1/runs", `{"params":{"A":"x"}} {}`, 400, "bad_request"},
		{"GET", "/v1/runs/20990101-000000-zzzz", "", 404, "run_not_found"},
		{"GET", "/v1/runs/..%2f..%2fetc", "", 400, "bad_name"},
		{"POST", "/v1/runs/20990101/cancel", "", 404, "run_not_found"},
		{"GET", "/v1/nothing", "", 404, "not_found"},
		{"GET", "/v1/runs?limit=-1", "", 400, "bad_request"},
		{"GET", "/v1/runs?limit=x", "", 400, "bad_request"},
		{"DELETE", "/v1/runs", "", 405, "method_not_allowed"},
		{"GET", "/v1/runs/x/cancel", "", 405, "method_not_allowed"},
		{"PUT", "/v1/health", "", 405, "method_not_allowed"},
	}
	for _, tc := range cases {
		st, m := rawCall(t, sock, tc.method, tc.path, tc.body, nil)
		e, _ := m["error"].(map[string]any)
		if st != tc.status || e == nil || e["code"] != tc.code || e["message"] == "" {
			t.Errorf("%s %s %q: %d %v, want %d %s", tc.method, tc.path, tc.body, st, m, tc.status, tc.code)
		}
	}
	rec, err := c.Submit(context.Background(), "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, c, rec.ID, 20*time.Second)
	// An edited factory file is not run with serve's old copy.
	orig, _ := os.ReadFile(f.Path)
	os.WriteFile(f.Path, append(orig, []byte("# edited\n")...), 0o644)
	if st, m := rawCall(t, sock, "POST", "/v1/runs", `{}`, nil); st != 409 || m["error"].(map[string]any)["code"] != "factory_changed" {
		t.Errorf("submit after the file changed: %d %v", st, m)
	}
	os.WriteFile(f.Path, orig, 0o644)
	for _, p := range []string{"../../../etc/passwd", "steps/a/1/attempt.json", "steps/a/1/../../../run.json", "/etc/passwd", "steps/../1/stdout.log"} {
		st, m := rawCall(t, sock, "GET", "/v1/runs/"+rec.ID+"/log?path="+p, "", nil)
		if e, _ := m["error"].(map[string]any); st != 400 || e["code"] != "bad_log_path" {
			t.Errorf("log path %q: %d %v, want 400 bad_log_path", p, st, m)
		}
	}
	// Encoded traversal on every route that takes a name: 4xx, never the
	// file it points at. The attack plants an attempt folder outside the
	// state folder whose egress summary names a host only it knows.
	outside := t.TempDir()
	writeSummary := func(dir string) {
		os.MkdirAll(dir, 0o700)
		line, _ := json.Marshal(record.Event{Seq: 1, Run: "x", Type: record.EvEgressSummary, Data: map[string]any{"hosts": []map[string]any{{"host": "planted.example", "connections": 1}}}})
		os.WriteFile(filepath.Join(dir, record.EventsFile), append(line, '\n'), 0o600)
	}
	writeSummary(filepath.Join(outside, "1"))
	rel, _ := filepath.Rel(filepath.Join(f.StateDir, record.RunsDir, rec.ID, record.StepsDir), outside)
	up := strings.ReplaceAll(rel, "/", "%2F")
	for _, p := range []struct{ method, path string }{
		{"GET", "/v1/runs/" + rec.ID + "/attempts/" + up + "/1/egress"},
		{"GET", "/v1/runs/" + rec.ID + "/attempts/" + strings.ReplaceAll(up, ".", "%2e") + "/1/egress"},
		{"GET", "/v1/runs/" + rec.ID + "/attempts/%2e%2e/1/egress"},
		{"GET", "/v1/runs/" + rec.ID + "/attempts/a%5C..%5C..%5Cx/1/egress"},
		{"GET", "/v1/runs/" + rec.ID + "/attempts/a%00/1/egress"},
		{"GET", "/v1/runs/%2e%2e"},
		{"GET", "/v1/runs/..%2F" + rec.ID},
		{"GET", "/v1/runs/%2e%2e/events"},
		{"GET", "/v1/runs/a%2Fb/log?path=events.jsonl"},
		{"POST", "/v1/runs/%2e%2e%2f" + rec.ID + "/cancel"},
		{"GET", "/v1/runs/" + rec.ID + "/log?path=steps/%2e%2e/1/events.jsonl"},
		{"GET", "/v1/runs/" + rec.ID + "/log?path=steps/a%2F..%2F..%2F/1/events.jsonl"},
	} {
		st, m := rawCall(t, sock, p.method, p.path, "", nil)
		if st < 400 || st > 499 || strings.Contains(fmt.Sprint(m), "planted.example") {
			t.Errorf("%s %s: %d %v, want 4xx", p.method, p.path, st, m)
		}
	}
	// The legitimate twin: the attempt's own egress report.
	if st, m := rawCall(t, sock, "GET", "/v1/runs/"+rec.ID+"/attempts/a/1/egress", "", nil); st != 200 || m["source"] == nil {
		t.Errorf("own egress report: %d %v", st, m)
	}
	// The legitimate twin: a step's own log reads.
	b, err := c.ReadLog(rec.ID, "steps/a/1/events.jsonl", 0, 1<<20)
	if err != nil || !strings.Contains(string(b), record.EvAttemptFinished) {
		t.Fatalf("reading the attempt's events through the API: %v %q", err, b)
	}
	if st, m := rawCall(t, sock, "GET", "/v1/health", "", nil); st != 200 || m["ok"] != true {
		t.Fatalf("health after bad requests: %d %v", st, m)
	}
}

func TestServeTCPNeedsToken(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [a]
steps:
  a:
    run: [sh, -c, "true"]
`)
	s, _, _ := startServer(t, f, ServeOptions{MaxParallel: 1, Listen: "127.0.0.1:0", Token: "tok-0123456789"})
	addr := s.ServeAddr()
	for _, hdr := range []string{"", "Bearer wrong", "Bearer tok-012345678", "Basic tok-0123456789"} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/runs", nil)
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("Authorization %q: status %d, want 401", hdr, resp.StatusCode)
		}
	}
	// A cookie alone cannot change state: a cross-site form could send it.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/runs", strings.NewReader(`{}`))
	req.AddCookie(&http.Cookie{Name: tokenCookie, Value: "tok-0123456789"})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Fatalf("cookie-only POST: %v %v, want 403", resp.StatusCode, err)
	}
	c := client.NewTCPClient(addr, "tok-0123456789", f.StateDir)
	rec, err := c.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := waitRun(t, c, rec.ID, 20*time.Second); d.Run.State != status.RunSucceeded {
		t.Fatalf("run over TCP: %s", d.Run.State)
	}
	// The page's entry swaps ?token= for a cookie.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get("http://" + addr + "/?token=tok-0123456789")
	if err != nil || resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].HttpOnly {
		t.Fatalf("token entry: %v %v", resp, err)
	}
}

func TestServeStopInterruptsAndResumes(t *testing.T) {
	stopFile := filepath.Join(t.TempDir(), "resumed")
	f := serveFactory(t, `
serve:
  resume: true
pipelines:
  default: [quick, slow, after]
steps:
  quick:
    run: [sh, -c, "echo q > q.txt"]
  slow:
    run: [sh, -c, "if [ -e \"$STOPFILE\" ]; then exit 0; fi; touch $KUSAW_ARTIFACTS/seen; sleep 30"]
    env: {STOPFILE: `+stopFile+`}
  after:
    run: [sh, -c, "test -e q.txt"]
`)
	s, c, stop := startServer(t, f, ServeOptions{MaxParallel: 1, StopGrace: 200 * time.Millisecond})
	ctx := context.Background()
	rec, err := c.Submit(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := c.Submit(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(s.E.State.AttemptDir(rec.ID, "slow", 1), "artifacts", "seen")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow step never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	st := &factory.State{Dir: f.StateDir}
	r1, _ := st.LoadRun(rec.ID)
	a, _ := st.Attempts(r1)
	if r1.State != status.RunInterrupted || a[len(a)-1].Outcome != status.OutcomeInterrupted {
		t.Fatalf("after stop: run %s, last attempt %s; want interrupted", r1.State, a[len(a)-1].Outcome)
	}
	if r2, _ := st.LoadRun(queued.ID); r2.State != status.RunInterrupted {
		t.Fatalf("queued run after stop: %s", r2.State)
	}
	if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Restart with resume: both runs continue and finish; the first keeps
	// its passed step and numbers its new attempt after the interrupted one.
	s2, c2, _ := startServer(t, f, ServeOptions{MaxParallel: 1})
	d := waitRun(t, c2, rec.ID, 30*time.Second)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("resumed run: %s (%s)", d.Run.State, d.Run.Message)
	}
	var names []string
	for _, at := range d.Attempts {
		names = append(names, at.Step+"/"+string(rune('0'+at.Number))+":"+string(at.Outcome))
	}
	if strings.Join(names, " ") != "quick/1:passed slow/1:interrupted slow/2:passed after/1:passed" {
		t.Fatalf("attempts of the resumed run: %v", names)
	}
	if d2 := waitRun(t, c2, queued.ID, 30*time.Second); d2.Run.State != status.RunSucceeded {
		t.Fatalf("resumed queued run: %s", d2.Run.State)
	}
	// The run's events continue the same chained log, which verifies, and
	// say where the run resumed.
	for _, id := range []string{rec.ID, queued.ID} {
		// run.json says succeeded a moment before the run's log is sealed.
		var b []byte
		var res chainlog.Result
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			b, err = os.ReadFile(filepath.Join(st.RunDir(id), record.EventsFile))
			if err != nil {
				t.Fatal(err)
			}
			res, err = chainlog.Verify(bytes.NewReader(b), s2.E.PublicKey(), chainlog.Binding{Run: id, Kind: chainlog.KindEvents})
			// run.json names the final seal a moment after the log has it.
			cur, _ := st.LoadRun(id)
			if err == nil && res.Final && cur != nil && cur.EventsSeal != nil && *cur.EventsSeal == res.LastSeal() || time.Now().After(end) {
				break
			}
		}
		if err != nil || !res.Final {
			t.Fatalf("events of resumed run %s: %v (%+v)", id, err, res)
		}
		if err := record.CheckRunSeal(st.RunDir(id), res); err != nil {
			t.Fatalf("run.json of resumed run %s: %v", id, err)
		}
		// The attack: cut the log back to its first final seal. The file
		// alone still verifies as closed; run.json's last seal catches it.
		first := bytes.Index(b, []byte(`{"seal":{"mark":"final"`))
		cut := b[:first+bytes.IndexByte(b[first:], '\n')+1]
		cres, err := chainlog.Verify(bytes.NewReader(cut), s2.E.PublicKey(), chainlog.Binding{Run: id, Kind: chainlog.KindEvents})
		if err != nil || !cres.Final || cres.Lines >= res.Lines {
			t.Fatalf("cut log of %s: %v %+v", id, err, cres)
		}
		if err := record.CheckRunSeal(st.RunDir(id), cres); err == nil || !strings.Contains(err.Error(), "cut back") {
			t.Fatalf("a resumed run's events cut back to the first final seal pass run.json's check: %v", err)
		}
		if strings.Count(string(b), `"type":"run.started"`) < 1 || strings.Count(string(b), `"type":"run.finished"`) != 2 {
			t.Fatalf("events of resumed run %s:\n%s", id, b)
		}
	}
	b, _ := os.ReadFile(filepath.Join(st.RunDir(rec.ID), record.EventsFile))
	if !strings.Contains(string(b), `"resumed_from":"slow"`) || strings.Count(string(b), `"type":"run.started"`) != 2 {
		t.Fatalf("the resumed run's events do not say where it resumed:\n%s", b)
	}
}

func TestServeOnePerStateDir(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [a]
steps:
  a:
    run: [sh, -c, "true"]
`)
	startServer(t, f, ServeOptions{MaxParallel: 1})
	if _, err := NewServer(f, ServeOptions{Log: zerolog.New(io.Discard)}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("a second serve on the same state directory: %v", err)
	}
	// TCP without a token is refused before anything listens.
	f2 := serveFactory(t, `
pipelines:
  default: [a]
steps:
  a:
    run: [sh, -c, "true"]
`)
	s, err := NewServer(f2, ServeOptions{Log: zerolog.New(io.Discard), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "kusaw config set serve.token --secret") {
		t.Fatalf("TCP listener without a token: %v", err)
	}
}

func TestWebPageIsSelfContained(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [a]
steps:
  a:
    run: [sh, -c, "true"]
`)
	startServer(t, f, ServeOptions{MaxParallel: 1})
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for _, p := range []string{"/", "/static/app.js", "/static/views.js", "/static/style.css"} {
		resp, err := hc.Get("http://x" + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) < 100 {
			t.Fatalf("%s: %d, %d bytes", p, resp.StatusCode, len(b))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		// Nothing is loaded from elsewhere: no absolute URL in the files.
		if strings.Contains(string(b), "http://") || strings.Contains(string(b), "https://") || strings.Contains(string(b), `src="//`) {
			t.Errorf("%s refers to another origin", p)
		}
		// Text goes in with textContent: no innerHTML to inject into.
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(string(b), sink) {
				t.Errorf("%s uses %s", p, sink)
			}
		}
	}
}

func TestEventTailReadsWholeLinesOnly(t *testing.T) {
	st := &factory.State{Dir: t.TempDir()}
	dir := st.RunDir("r1")
	if err := os.MkdirAll(filepath.Join(dir, record.StepsDir, "a", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	runEv := filepath.Join(dir, record.EventsFile)
	attEv := filepath.Join(dir, record.StepsDir, "a", "1", record.EventsFile)
	line := func(seq int, typ string, ts time.Time) string {
		b, _ := json.Marshal(map[string]any{"prev": "x", "seq": seq, "ts": ts, "run": "r1", "type": typ})
		return string(b) + "\n"
	}
	t0 := time.Now().UTC()
	full := line(2, record.EvAttemptStarted, t0.Add(time.Millisecond))
	os.WriteFile(runEv, []byte(line(1, record.EvRunStarted, t0)+`{"prev":"x","seal":"sig"}`+"\n"), 0o644)
	os.WriteFile(attEv, []byte(full[:10]), 0o644) // a line still being written
	tail := newEventTail(st, "r1")
	got := tail.poll()
	if len(got) != 1 || got[0].Type != record.EvRunStarted {
		t.Fatalf("first poll: %+v (want run.started only: seal lines and half lines skipped)", got)
	}
	f, _ := os.OpenFile(attEv, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(full[10:])
	f.Close()
	got = tail.poll()
	if len(got) != 1 || got[0].Type != record.EvAttemptStarted || got[0].Seq != 2 {
		t.Fatalf("second poll: %+v", got)
	}
	if got = tail.poll(); len(got) != 0 {
		t.Fatalf("third poll repeats: %+v", got)
	}
}

// TestServeSocketRefusesOtherUsers: another user who can reach the state
// directory still cannot talk to serve (the socket is 0600); the owner can.
func TestServeSocketRefusesOtherUsers(t *testing.T) {
	skip := func(why string) {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		skip("switching to another user to attack the socket needs root")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		skip("curl is not installed")
	}
	f := serveFactory(t, `
pipelines:
  default: [a]
steps:
  a:
    run: [sh, -c, "true"]
`)
	startServer(t, f, ServeOptions{MaxParallel: 1})
	// Open every folder on the way, so only the socket's own mode stands.
	for d := f.StateDir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)
	get := func(uid uint32) error {
		cmd := exec.Command(curl, "-sf", "--max-time", "5", "--unix-socket", sock, "http://kusaw/v1/health")
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := get(65534); err == nil {
		t.Fatal("another user (nobody) talked to serve through its socket")
	}
	if err := get(0); err != nil {
		t.Fatalf("the owner cannot talk to serve: %v", err)
	}
}

// TestServeLimitCountsAttempts: a parallel group of three and a step with
// three candidates in one run never run more attempts at once than
// max_parallel, and do use it.
func TestServeLimitCountsAttempts(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [[a, b, c], d]
steps:
  a: {run: [sh, -c, "sleep 0.3; echo a > a.txt"]}
  b: {run: [sh, -c, "sleep 0.3; echo b > b.txt"]}
  c: {run: [sh, -c, "sleep 0.3; echo c > c.txt"]}
  d: {candidates: 3, select: all, run: [sh, -c, "sleep 0.3"]}
`)
	_, c, _ := startServer(t, f, ServeOptions{MaxParallel: 2})
	rec, err := c.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := waitRun(t, c, rec.ID, 60*time.Second)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("run: %s %s", d.Run.State, d.Run.Message)
	}
	if len(d.Attempts) != 6 {
		t.Fatalf("want 6 attempts, got %d", len(d.Attempts))
	}
	if got := record.MaxOverlap(d.Attempts); got != 2 {
		t.Fatalf("%d attempts ran at once with max_parallel 2; want exactly 2", got)
	}
}
