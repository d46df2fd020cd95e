package worker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/nats-io/nats.go"
)

const slowSecretStep = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [write]
steps:
  write:
    env:
      TOKEN: {secret: tok}
    run: [sh, -c, 'sleep 4; test "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" = e5bf47ca990f9d6d && echo from-worker > made.txt']
`

// TestForgedWorkerMessages: an enrolled worker (mallory) that did not
// claim an attempt another worker (w1) runs tries, with what its NATS
// permissions let it publish, to report a result in w1's name with
// w1's token, and to take the claim over and get the attempt's secrets
// sealed to itself. Serve must answer neither; w1's run (the twin)
// succeeds with its commit and its own secret.
func TestForgedWorkerMessages(t *testing.T) {
	r := startServe(t, slowSecretStep, 30*time.Second)
	r.startWorker(t, "w1")

	// mallory enrolls like any worker but runs her own client.
	tok, err := r.srv.NewToken("", cluster.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := Join(r.ctx, t.TempDir(), tok.String(), "mallory", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := cluster.Dial(id, "mallory", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	h, err := cluster.Open(r.ctx, nc)
	if err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		secret string // what mallory opened
		notes  []string
	}
	got := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() { got <- o }()
		ctx, cancel := context.WithTimeout(r.ctx, 20*time.Second)
		defer cancel()
		// Wait for w1's claim, and a moment for serve to see it. mallory
		// learns its attempt and token somehow (a worker of the pool reads
		// claims by attempt, not a list of them): serve's view tells the test.
		sh, err := cluster.Open(ctx, serveConn(t, r))
		if err != nil {
			o.notes = append(o.notes, err.Error())
			return
		}
		var claim cluster.Claim
		var w1tok uint64
		for w1tok == 0 {
			if ctx.Err() != nil {
				o.notes = append(o.notes, "no claim seen")
				return
			}
			if keys, _ := sh.ClaimedKeys(ctx, "default"); len(keys) > 0 {
				claim, w1tok, _ = h.Holder(ctx, "default", keys[0])
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second)
		key := cluster.Key(claim.Attempt)

		// (1) A result in w1's name, with w1's token.
		res, _ := json.Marshal(cluster.Result{Attempt: claim.Attempt, Worker: "w1", Token: w1tok, Error: "forged by mallory"})
		for _, subj := range []string{"kusaw.result." + key, "kusaw.result." + key + ".w1", "kusaw.result." + key + ".mallory"} {
			nc.Publish(subj, res)
		}
		nc.Flush()
		time.Sleep(500 * time.Millisecond)
		// (2) Take the claim over, then ask for the secrets as its holder.
		mine, _ := json.Marshal(cluster.Claim{Worker: "mallory", Attempt: claim.Attempt, At: time.Now()})
		ack, err := h.JS.Publish(ctx, "kusaw.claims.default."+key, mine)
		o.notes = append(o.notes, "claim put: "+errString(err))
		rev := w1tok + 1
		if err == nil {
			rev = ack.Sequence
		}
		req, _ := json.Marshal(cluster.SecretsRequest{Attempt: claim.Attempt, Worker: "mallory", Token: rev})
		for _, subj := range []string{"kusaw.secrets." + key, "kusaw.secrets." + key + ".mallory"} {
			m, err := nc.Request(subj, req, 2*time.Second)
			if err != nil {
				continue
			}
			var rep cluster.SecretsReply
			if json.Unmarshal(m.Data, &rep) == nil && len(rep.Sealed) > 0 {
				if plain, err := id.Open(rep.Sealed, id.ServeXKey); err == nil {
					o.secret = string(plain)
				}
			}
		}

	}()

	ctx, cancel := context.WithTimeout(r.ctx, 40*time.Second)
	defer cancel()
	run, err := r.e.Run(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	o := <-got
	t.Logf("mallory: %v", o.notes)
	if !strings.Contains(strings.Join(o.notes, " "), "claim put: ") || strings.Contains(strings.Join(o.notes, " "), "claim put: ok") {
		t.Errorf("mallory wrote over w1's claim, or did not try: %v", o.notes)
	}
	if strings.Contains(o.secret, "s3cr3t-value-42") {
		t.Errorf("mallory took over w1's claim and opened the attempt's secrets: %s", o.secret)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	for _, a := range atts {
		if strings.Contains(a.Message, "forged") {
			t.Errorf("serve accepted mallory's result in w1's name: attempt %s/%d %s %s", a.Step, a.Number, a.Outcome, a.Message)
		}
	}
	// The twin: w1's own attempt went through, with its secret and commit.
	if run.Record.State != status.RunSucceeded {
		for _, a := range atts {
			t.Logf("attempt %s/%d: %s %s %s (worker %s)", a.Step, a.Number, a.Outcome, a.Reason, a.Message, a.Worker)
		}
		t.Fatalf("w1's run: %s %s", run.Record.State, run.Record.Message)
	}
	if len(atts) != 1 || atts[0].Worker != "w1" {
		t.Fatalf("attempts %+v", atts)
	}
	ev, _ := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, "write", 1), record.EventsFile))
	if strings.Contains(string(ev), `"worker":"mallory"`) {
		t.Errorf("mallory's messages reached the attempt's events:\n%s", ev)
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// serveConn is a connection with serve's own identity, for a test's look
// at what serve sees.
func serveConn(t *testing.T, r *rig) *nats.Conn {
	nc, err := r.srv.ConnectInProcess("test")
	if err != nil {
		t.Error(err)
		return nil
	}
	t.Cleanup(nc.Close)
	return nc
}
