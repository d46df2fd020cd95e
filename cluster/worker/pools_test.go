package worker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/dispatch"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/nats-io/nats.go/jetstream"
)

const releaseStep = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [ship]
steps:
  ship:
    pool: release
    env:
      TOKEN: {secret: tok}
    run: [sh, -c, 'test "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" = e5bf47ca990f9d6d && echo shipped > shipped.txt']
`

// Attacker's side: mallory, a worker enrolled for pool default, goes
// after an attempt of pool release (whose id she knows) while no release
// worker runs: she tries to claim it in release's claims (her permissions
// refuse it) and claims it in her own pool's instead, asks serve for its
// secrets and for a bundle with that claim's token, and reports a result
// for it. Serve answers none of it, records her result as fenced, and the
// attempt waits for a release worker. The legitimate twin: a worker enrolled for
// release then runs it, with its secret, and its commit lands.
func TestPoolIsABoundary(t *testing.T) {
	r := startServe(t, releaseStep, 30*time.Second)
	mid, mnc, mh := r.enrolled(t, "mallory")

	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	type ran struct {
		run *factory.Run
		err error
	}
	done := make(chan ran, 1)
	go func() {
		run, err := r.e.Run(ctx, "")
		done <- ran{run, err}
	}()

	// The attempt's id, as serve published it (the test reads the queue
	// as serve; mallory cannot: TestWorkerTakesOnlyItsPools).
	snc, err := r.srv.ConnectInProcess("test")
	if err != nil {
		t.Fatal(err)
	}
	defer snc.Close()
	sjs, _ := jetstream.New(snc)
	var attemptID string
	for attemptID == "" && ctx.Err() == nil {
		if st, err := sjs.Stream(ctx, cluster.WorkStream); err == nil {
			if m, err := st.GetLastMsgForSubject(ctx, cluster.WorkSubject("release")); err == nil {
				var w cluster.Work
				var spec struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(m.Data, &w) == nil && json.Unmarshal(w.Spec, &spec) == nil {
					attemptID = spec.ID
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	key := cluster.Key(attemptID)

	// (1) The claim: not in release's claims, so in her own pool's.
	cctx, ccancel := context.WithTimeout(ctx, time.Second)
	if _, err := mh.Claim(cctx, "release", attemptID, "mallory"); err == nil {
		t.Error("mallory claimed an attempt in pool release's claims")
	}
	ccancel()
	tok, err := mh.Claim(ctx, "default", attemptID, "mallory")
	if err != nil {
		t.Fatalf("mallory cannot claim in her own pool at all: %v", err)
	}
	// (2) The secrets, as the claim's holder.
	req, _ := json.Marshal(cluster.SecretsRequest{Attempt: attemptID, Worker: "mallory", Token: tok})
	if m, err := mnc.Request(cluster.SecretsSubject(key, "mallory"), req, 5*time.Second); err != nil {
		t.Fatalf("serve did not answer mallory's secrets request: %v", err)
	} else {
		var rep cluster.SecretsReply
		if json.Unmarshal(m.Data, &rep) != nil || len(rep.Sealed) > 0 || rep.Error == "" {
			plain, _ := mid.Open(rep.Sealed, mid.ServeXKey)
			t.Errorf("serve answered mallory's secrets request for a release attempt: %s", plain)
		}
	}
	// (3) A full bundle of the code.
	breq, _ := json.Marshal(cluster.BundleRequest{Attempt: attemptID, Worker: "mallory", Token: tok, Repo: "app"})
	if m, err := mnc.Request(cluster.BundleSubject(key, "mallory"), breq, 5*time.Second); err == nil {
		var rep cluster.BundleReply
		if json.Unmarshal(m.Data, &rep) != nil || rep.Object != "" {
			t.Errorf("serve made mallory a bundle of a release attempt: %s", m.Data)
		}
	}
	// (4) A result.
	mjs, _ := jetstream.New(mnc)
	res, _ := json.Marshal(cluster.Result{Attempt: attemptID, Worker: "mallory", Token: tok, Error: "forged by mallory"})
	if _, err := mjs.Publish(ctx, cluster.ResultSubject(key, "mallory"), res); err != nil {
		t.Fatalf("mallory cannot publish a result at all: %v", err)
	}
	fenced := filepath.Join(r.srv.Dir, dispatch.FencedFile)
	waitUntil(t, "mallory's result recorded as fenced", func() bool {
		b, _ := os.ReadFile(fenced)
		return strings.Count(string(b), `"worker":"mallory"`) >= 1
	})
	if b, _ := os.ReadFile(fenced); !strings.Contains(string(b), "may not take pool release") {
		t.Errorf("fenced.jsonl does not say why: %s", b)
	}
	// Nobody holds it in release: a rightful worker can claim.
	sh, err := cluster.Open(ctx, snc)
	if err != nil {
		t.Fatal(err)
	}
	if c, cur, err := sh.Holder(ctx, "release", attemptID); cur != 0 || err != nil {
		t.Errorf("a claim in release: %+v %v", c, err)
	}

	// The twin: a release worker takes the attempt offered again.
	r.startWorkerWith(t, "rel", Options{Pools: []string{"release"}}, nil)
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	atts, _ := r.e.State.Attempts(got.run.Record)
	if got.run.Record.State != status.RunSucceeded || len(atts) != 1 || atts[0].Worker != "rel" {
		for _, a := range atts {
			t.Logf("attempt %s/%d: %s %s %s (worker %s)", a.Step, a.Number, a.Outcome, a.Reason, a.Message, a.Worker)
		}
		t.Fatalf("the release run: %s %s", got.run.Record.State, got.run.Record.Message)
	}
	ev, _ := os.ReadFile(filepath.Join(record.AttemptDir(got.run.Dir, "ship", 1), record.EventsFile))
	if !strings.Contains(string(ev), `"type":"cluster.fenced"`) || strings.Contains(string(ev), "forged") {
		t.Errorf("the attempt's events: a fenced claim, never mallory's result:\n%s", ev)
	}
}

// A worker whose token allows pool default only cannot offer pool
// release: kusaw worker says so before it connects. Without --pool it
// offers its token's pools.
func TestWorkerOffersOnlyAllowedPools(t *testing.T) {
	r := startServe(t, releaseStep, 30*time.Second)
	dir := t.TempDir()
	tok, _ := r.srv.NewToken("", cluster.Grant{Pools: []string{"gpu", "release"}})
	if _, err := Join(r.ctx, dir, tok.String(), "w", "test", []string{"gpu"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(r.ctx, Options{StateDir: dir, Kusaw: "/bin/false", Pools: []string{"big"}}); !errors.Is(err, ErrPoolNotAllowed) || !strings.Contains(err.Error(), "allows pools gpu,release only") {
		t.Fatalf("a worker offered a pool its token does not allow: %v", err)
	}
	w, err := New(r.ctx, Options{StateDir: dir, Kusaw: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if strings.Join(w.Pools(), ",") != "gpu,release" {
		t.Fatalf("pools %v", w.Pools())
	}
}

// kusaw worker --join on a worker that joined already: the token it
// joined with again changes nothing (a service started with --join); a
// new token joins it again with the new token's pools, same keys and
// name; an earlier kusaw's worker (no token noted) started again with
// its spent token keeps its enrollment.
func TestJoinAgainWithNewToken(t *testing.T) {
	r := startServe(t, releaseStep, 30*time.Second)
	dir := t.TempDir()
	tok, _ := r.srv.NewToken("", cluster.Grant{})
	id, err := Join(r.ctx, dir, tok.String(), "w", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Join(r.ctx, dir, tok.String(), "w", "test", nil)
	if err != nil || again.NKey() != id.NKey() {
		t.Fatalf("the same token again: %v", err)
	}
	rel, _ := r.srv.NewToken("", cluster.Grant{Pools: []string{"release"}})
	moved, err := Join(r.ctx, dir, rel.String(), "other-name", "test", nil)
	if err != nil || moved.NKey() != id.NKey() || moved.Name != "w" || moved.Grant.String() != "release" {
		t.Fatalf("a new token: %v %+v", err, moved)
	}
	if e := r.srv.Registry.Get("w"); e == nil || strings.Join(e.Allowed, ",") != "release" {
		t.Fatalf("registry after joining again: %+v", e)
	}
	loaded, _ := cluster.LoadIdentity(dir)
	if loaded.Grant.String() != "release" {
		t.Fatalf("the saved identity's grant: %v", loaded.Grant)
	}
	// An earlier kusaw's identity: nothing noted of its token.
	loaded.Joined = ""
	loaded.Save(dir)
	if kept, err := Join(r.ctx, dir, rel.String(), "w", "test", nil); err != nil || kept.NKey() != id.NKey() {
		t.Fatalf("an earlier worker with its spent token: %v", err)
	}
	// A spent token on a worker that noted another: refused.
	loaded.Joined = "something-else"
	loaded.Save(dir)
	if _, err := Join(r.ctx, dir, tok.String(), "w", "test", nil); err == nil || !strings.Contains(err.Error(), "used already") {
		t.Fatalf("a spent token: %v", err)
	}
}
