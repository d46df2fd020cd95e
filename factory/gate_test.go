package factory

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// gatedEngine makes an engine over a factory whose pipeline waits at a
// gate before step deploy.
func gatedEngine(t *testing.T, gate string, opts Options) (*Engine, *[]record.Event, *sync.Mutex) {
	t.Helper()
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [build, deploy]
steps:
  build: {run: [sh, -c, "echo b > b.txt"]}
  deploy:
    gate: `+gate+`
    run: [sh, -c, "echo d > d.txt"]
`, "app")
	var mu sync.Mutex
	var evs []record.Event
	opts.Kusaw = "/bin/false"
	opts.CancelPoll = 20 * time.Millisecond
	opts.OnEvent = func(ev record.Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }
	e, err := New(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e, &evs, &mu
}

// startRun runs the default pipeline in the background and waits until it
// waits at its gate.
func startRun(t *testing.T, e *Engine) (*Run, chan struct{}) {
	t.Helper()
	r, err := e.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { e.Execute(context.Background(), r); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := e.State.LoadRun(r.ID())
		if err == nil && rec.State == status.RunWaiting && rec.Gate != nil {
			return r, done
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not reach its gate: %+v %v", rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGateApproveAndReject(t *testing.T) {
	e, evs, mu := gatedEngine(t, `{message: "deploy?", approvers: [alice]}`, Options{})
	r, done := startRun(t, e)
	if _, err := e.State.DecideGate(r.ID(), record.GateDecision{Approve: true, By: "mallory"}); !errors.Is(err, record.ErrNotApprover) {
		t.Fatalf("a non-approver decided: %v", err)
	}
	if _, err := e.State.DecideGate(r.ID(), record.GateDecision{Step: "build", Approve: true, By: "alice"}); !errors.Is(err, record.ErrNotWaiting) {
		t.Fatalf("a decision on another step's gate: %v", err)
	}
	if _, err := e.State.DecideGate(r.ID(), record.GateDecision{Approve: true, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	<-done
	if r.Record.State != status.RunSucceeded || r.Record.Steps[1].Gate == nil || r.Record.Steps[1].Gate.By != "alice" {
		t.Fatalf("after approval: %s %s %+v", r.Record.State, r.Record.Message, r.Record.Steps[1])
	}
	mu.Lock()
	ok := false
	for _, ev := range *evs {
		if ev.Type == record.EvGateApproved && ev.Data["by"] == "alice" && ev.Data["at"] != nil {
			ok = true
		}
	}
	mu.Unlock()
	if !ok {
		t.Fatal("no gate.approved event naming alice")
	}

	e, _, _ = gatedEngine(t, `"deploy?"`, Options{})
	r, done = startRun(t, e)
	if _, err := e.State.DecideGate(r.ID(), record.GateDecision{Approve: false, By: "bob", Reason: "not today"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.State.DecideGate(r.ID(), record.GateDecision{Approve: true, By: "carol"}); err == nil {
		t.Fatal("a second decision was taken")
	}
	<-done
	if r.Record.State != status.RunFailed || r.Record.Reason != status.ReasonGateRejected || !strings.Contains(r.Record.Message, "bob: not today") {
		t.Fatalf("after rejection: %s %s %s", r.Record.State, r.Record.Reason, r.Record.Message)
	}
	if r.Record.Steps[1].Started != nil {
		t.Fatal("the gated step ran after a rejection")
	}
}

func TestGateTimeout(t *testing.T) {
	e, _, _ := gatedEngine(t, `{message: "deploy?", timeout: 300ms}`, Options{})
	r, done := startRun(t, e)
	<-done
	if r.Record.State != status.RunFailed || r.Record.Reason != status.ReasonGateTimeout {
		t.Fatalf("after the timeout: %s %s %s", r.Record.State, r.Record.Reason, r.Record.Message)
	}
}

// TestNotifications: a webhook with a secret is signed and received; a
// dead URL is retried, recorded and does not fail the run.
func TestNotifications(t *testing.T) {
	type got struct {
		sig  string
		body []byte
	}
	recv := make(chan got, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("webhook-id") == "" || r.Header.Get("webhook-timestamp") == "" || !strings.HasPrefix(r.Header.Get("webhook-signature"), "v1,") && r.Header.Get(SignatureHeader) != "" {
			t.Errorf("a notification without Standard Webhooks headers: %v", r.Header)
		}
		recv <- got{r.Header.Get(SignatureHeader), b}
	}))
	defer srv.Close()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String() + "/hook"
	l.Close()
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
notify:
  - {url: `+srv.URL+`/secret-path, on: [run.finished], secret: {secret: hook.key}}
pipelines:
  default:
    steps: [ok]
    notify: [{url: `+dead+`, on: [run.finished]}]
steps:
  ok: {run: ["true"]}
`, "app")
	e, err := New(f, Options{Kusaw: "/bin/false", Secrets: fakeSecrets{"hook.key": "s3cret"}, NotifyFor: 300 * time.Millisecond, NotifyBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Record.State != status.RunSucceeded {
		t.Fatalf("run: %s %s", r.Record.State, r.Record.Message)
	}
	var g got
	select {
	case g = <-recv:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification received")
	}
	m := hmac.New(sha256.New, []byte("s3cret"))
	m.Write(g.body)
	if g.sig != "sha256="+hex.EncodeToString(m.Sum(nil)) {
		t.Fatalf("signature %q does not match the body", g.sig)
	}
	var n Notification
	if err := json.Unmarshal(g.body, &n); err != nil || n.Run != r.ID() || n.State != "succeeded" || n.Event != "run.finished" || n.Pipeline != "default" || n.Link == "" {
		t.Fatalf("body: %s (%v)", g.body, err)
	}
	if !e.WaitNotifications(10 * time.Second) {
		t.Fatal("the dead URL's retries did not end")
	}
	time.Sleep(50 * time.Millisecond) // notify.jsonl is sealed right after
	evs := readEvents(t, r.Dir+"/events.jsonl")
	late := readEvents(t, r.Dir+"/"+NotifyFile)
	var delivered, failedFinal int
	for _, ev := range append(evs, late...) {
		if ev.Type == record.EvNotifyDelivered {
			delivered++
		}
		if ev.Type == record.EvNotifyFailed && ev.Data["final"] == true {
			failedFinal++
			if strings.Contains(ev.Data["url"].(string), "hook") {
				t.Errorf("a webhook's path was recorded: %v", ev.Data["url"])
			}
		}
		if b, _ := json.Marshal(ev); strings.Contains(string(b), "s3cret") || strings.Contains(string(b), "secret-path") {
			t.Errorf("an event holds the secret or the secret path: %s", b)
		}
	}
	if delivered != 1 || failedFinal != 1 {
		t.Fatalf("delivered %d, failed finally %d; want 1 and 1", delivered, failedFinal)
	}
}

// readEvents reads an events file's lines (seals and other lines without a
// type are skipped).
func readEvents(t *testing.T, path string) []record.Event {
	t.Helper()
	b, _ := os.ReadFile(path)
	var out []record.Event
	for _, line := range strings.Split(string(b), "\n") {
		var ev record.Event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type != "" {
			out = append(out, ev)
		}
	}
	return out
}

// TestStandardWebhookSignature: a notification carries webhook-id,
// webhook-timestamp and a v1 signature over id.timestamp.body that a
// Standard Webhooks receiver checks; a whsec_ secret signs with its
// decoded bytes; a replay keeps the id (receivers refuse it) and a
// changed body no longer verifies.
func TestStandardWebhookSignature(t *testing.T) {
	body := []byte(`{"event":"run.finished"}`)
	key := standardKey("whsec_" + base64.StdEncoding.EncodeToString([]byte("k3y")))
	if string(key) != "k3y" {
		t.Fatalf("whsec_ key decoded to %q", key)
	}
	now := time.Unix(1700000000, 0)
	h := standardHeaders("msg_1", key, now, body)
	verify := func(h http.Header, body []byte) bool {
		m := hmac.New(sha256.New, []byte("k3y"))
		m.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "."))
		m.Write(body)
		return h.Get("webhook-signature") == "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	if h.Get("webhook-id") != "msg_1" || h.Get("webhook-timestamp") != "1700000000" || !verify(h, body) {
		t.Fatalf("headers %v do not verify", h)
	}
	if verify(h, []byte(`{"event":"run.waiting"}`)) {
		t.Fatal("a changed body verified")
	}
	if got := standardHeaders("msg_1", nil, now, body); got.Get("webhook-signature") != "" || got.Get("webhook-id") != "msg_1" {
		t.Fatalf("without a secret: %v", got)
	}
	if a, b := newMessageID(), newMessageID(); a == b || !strings.HasPrefix(a, "msg_") {
		t.Fatalf("message ids %q %q", a, b)
	}
}
