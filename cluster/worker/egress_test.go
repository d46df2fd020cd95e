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
	"github.com/kusaw/kusaw/status"
	"github.com/nats-io/nats.go/jetstream"
)

const proxiedStep = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [fetch]
steps:
  fetch:
    sandbox: {mode: required, network: allowlist, egress: {allow: [example.org]}}
    run: [sh, -c, 'echo fetched > fetched.txt']
`

// scriptedLostAfter is lost_after for a rig with a scripted worker,
// which sends no heartbeats: longer than any of its tests on a loaded
// machine, so the attempt is never found lost and dispatched again.
const scriptedLostAfter = 5 * time.Minute

// scripted is an enrolled worker driven by hand: it takes the attempt
// from the work queue and claims it like any worker, then reports what
// it likes.
type scripted struct {
	t    *testing.T
	r    *rig
	name string
	h    *cluster.Handles
	key  func() []byte // seals its logs: its enrolled key
}

func (r *rig) scripted(t *testing.T, name string) *scripted {
	id, _, h := r.enrolled(t, name)
	return &scripted{t: t, r: r, name: name, h: h, key: func() []byte { return id.SigningKey() }}
}

// take waits for an attempt of pool default, claims it and acks it.
func (s *scripted) take(ctx context.Context) (*record.AttemptSpec, cluster.Work, uint64) {
	t := s.t
	cons, err := s.h.JS.CreateOrUpdateConsumer(ctx, cluster.WorkStream, jetstream.ConsumerConfig{Durable: "pool-default",
		FilterSubject: cluster.WorkSubject("default"), AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var work cluster.Work
	if err := json.Unmarshal(msg.Data(), &work); err != nil {
		t.Fatal(err)
	}
	spec, err := record.ParseSpec(work.Spec)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.h.Claim(ctx, cluster.PoolOfWork(msg.Subject()), spec.ID, s.name)
	if err != nil {
		t.Fatal(err)
	}
	_ = msg.Ack()
	return spec, work, tok
}

// commit makes a commit on the attempt's base in a repo of its own and
// stores it as a bundle; it returns the commit and adds the object to res.
func (s *scripted) commit(ctx context.Context, spec *record.AttemptSpec, work cluster.Work, tok uint64, res *cluster.Result) string {
	t := s.t
	repo := t.TempDir()
	testkit.GitRun(t, repo, "init", "-q")
	base := spec.Repos[0].Base
	in := filepath.Join(t.TempDir(), "in.bundle")
	if _, err := s.h.GetFile(ctx, work.Inputs["app"], in); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ImportBundle(ctx, repo, in); err != nil {
		t.Fatal(err)
	}
	head := testkit.GitRun(t, repo, "-c", "user.name=m", "-c", "user.email=m@x", "commit-tree", base+"^{tree}", "-p", base, "-m", "from "+s.name)
	out := filepath.Join(t.TempDir(), "out.bundle")
	if _, err := cluster.MakeBundle(ctx, repo, out, head, []string{base}); err != nil {
		t.Fatal(err)
	}
	s.put(ctx, spec, tok, "out-app.bundle", out, res)
	res.Heads["app"], res.Bundles["app"] = head, cluster.ObjectName("default", spec.ID, tok, "out-app.bundle")
	return head
}

// put stores a file as the attempt's object, with its digest in res.
func (s *scripted) put(ctx context.Context, spec *record.AttemptSpec, tok uint64, name, path string, res *cluster.Result) string {
	obj := cluster.ObjectName("default", spec.ID, tok, name)
	_, sum, err := s.h.PutFileSum(ctx, obj, path)
	if err != nil {
		s.t.Fatal(err)
	}
	res.Digests[obj] = sum
	return obj
}

// egressLog writes an egress log sealed with the worker's own key for the
// attempt, with one connection.
func (s *scripted) egressLog(spec *record.AttemptSpec) string {
	p := filepath.Join(s.t.TempDir(), record.EgressLogFile)
	w, err := chainlog.Create(p, s.key(), chainlog.Options{Binding: chainlog.Binding{Run: spec.Run, Step: spec.Step, Attempt: spec.Number, Kind: chainlog.KindEgress}, SealInterval: -1})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := w.Append(map[string]any{"host": "exfil.example.net", "port": 443, "decision": "allowed"}); err != nil {
		s.t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// report sends a passed result for the attempt.
func (s *scripted) report(ctx context.Context, spec *record.AttemptSpec, tok uint64, res cluster.Result) {
	rec := record.AttemptRecord{Run: spec.Run, Step: spec.Step, Number: spec.Number, Of: spec.Of, Mode: spec.Mode, Network: spec.Network,
		Outcome: status.OutcomePassed, Started: time.Now().UTC(),
		Worktrees: []record.WorktreeRecord{{Repo: "app", BaseSHA: spec.Repos[0].Base, HeadSHA: res.Heads["app"], Changed: true}}}
	res.Attempt, res.Worker, res.Token = spec.ID, s.name, tok
	res.Record, _ = json.Marshal(rec)
	b, _ := json.Marshal(res)
	if _, err := s.h.JS.Publish(ctx, cluster.ResultSubject(cluster.Key(spec.ID), s.name), b); err != nil {
		s.t.Fatal(err)
	}
}

// Attacker's side: mallory, an enrolled worker, runs a proxied attempt
// (sandbox required, network allowlist) and returns a commit with an
// egress.log that does not verify against her enrolled key (a line edited
// after sealing: she hides a connection), or with no egress.log at all.
// Serve refuses the result either way: the attempt fails with a message
// naming her and why, and neither the attempt nor the run branch moves to
// her commit. The twin: the same report with the log as sealed is
// accepted and the commit lands.
func TestRemoteEgressLogMustVerify(t *testing.T) {
	r := startServe(t, proxiedStep, scriptedLostAfter)
	m := r.scripted(t, "mallory")
	for _, c := range []struct {
		name   string
		egress func(p string) string // the file to send ("": none)
		want   string                // in the attempt's message; "" for the twin
	}{
		{"tampered", func(p string) string {
			b, _ := os.ReadFile(p)
			tampered := bytes.Replace(b, []byte("exfil.example.net"), []byte("docs.example.org!"), 1)
			if bytes.Equal(b, tampered) {
				t.Fatal("nothing to tamper with")
			}
			os.WriteFile(p, tampered, 0o600)
			return p
		}, "egress.log was refused"},
		{"missing", func(string) string { return "" }, "sent no egress.log"},
		{"another attempt's", func(p string) string { return "other:" + p }, "egress.log was refused"},
		{"as sealed", func(p string) string { return p }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
			defer cancel()
			done := make(chan *factory.Run, 1)
			go func() {
				run, err := r.e.Run(ctx, "")
				if err != nil {
					t.Error(err)
				}
				done <- run
			}()
			m.t = t
			spec, work, tok := m.take(ctx)
			if !dispatch.Proxied(spec) {
				t.Fatalf("the spec is not proxied: mode %s network %s", spec.Mode, spec.Network)
			}
			res := cluster.Result{Heads: map[string]string{}, Bundles: map[string]string{}, Files: map[string]string{}, Digests: map[string]string{}}
			head := m.commit(ctx, spec, work, tok, &res)
			if p := c.egress(m.egressLog(spec)); p != "" {
				if other, ok := strings.CutPrefix(p, "other:"); ok {
					// A sealed log, named under an object of another attempt.
					obj := cluster.ObjectName("default", spec.Run+"/other/1", 1, record.EgressLogFile)
					_, sum, err := m.h.PutFileSum(ctx, obj, other)
					if err != nil {
						t.Fatal(err)
					}
					res.Files[record.EgressLogFile], res.Digests[obj] = obj, sum
				} else {
					res.Files[record.EgressLogFile] = m.put(ctx, spec, tok, record.EgressLogFile, p, &res)
				}
			}
			m.report(ctx, spec, tok, res)
			run := <-done
			if run == nil {
				t.FailNow()
			}
			atts, _ := r.e.State.Attempts(run.Record)
			if len(atts) != 1 {
				t.Fatalf("attempts %+v", atts)
			}
			a := atts[0]
			repo := run.Record.Repos[0]
			branchHead := testkit.GitRun(t, repo.Path, "rev-parse", repo.Branch)
			attemptHead := testkit.GitRun(t, repo.Path, "for-each-ref", "--format=%(objectname)", "refs/heads/"+spec.Repos[0].AttemptBranch)
			if c.want == "" {
				if run.Record.State != status.RunSucceeded || branchHead != head {
					t.Fatalf("the twin: run %s (%s), run branch at %s, want %s", run.Record.State, a.Message, branchHead, head)
				}
				if _, err := os.Stat(filepath.Join(record.AttemptDir(run.Dir, spec.Step, spec.Number), record.EgressLogFile)); err != nil {
					t.Errorf("the verified egress.log is not in the attempt's folder: %v", err)
				}
				return
			}
			if a.Outcome == status.OutcomePassed || run.Record.State == status.RunSucceeded {
				t.Fatalf("%s egress.log: attempt %s, run %s", c.name, a.Outcome, run.Record.State)
			}
			if !strings.Contains(a.Message, c.want) || !strings.Contains(a.Message, "mallory") {
				t.Errorf("attempt message %q: want it to name mallory and %q", a.Message, c.want)
			}
			if branchHead == head || attemptHead == head {
				t.Errorf("mallory's commit moved a branch: run branch %s, attempt branch %s", branchHead, attemptHead)
			}
			if _, err := os.Stat(filepath.Join(record.AttemptDir(run.Dir, spec.Step, spec.Number), record.EgressLogFile)); err == nil {
				t.Error("the refused egress.log is in the attempt's folder as its egress.log")
			}
		})
	}
}

// Attacker's side: the holder of an attempt streams events of the kinds
// only serve writes (its verdict that an egress log verified, a claim, a
// branch that moved, a gate approved, the step's end) and of kinds kusaw
// does not know into the attempt's record, which serve seals with its own
// key. Serve writes none of them, and records each type it refused; the
// twin: the same holder's process, provider and egress events are
// written, with its name.
func TestWorkerCannotForgeServeEvents(t *testing.T) {
	r := startServe(t, madeArtifact, scriptedLostAfter)
	m := r.scripted(t, "mallory")
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	done := make(chan *factory.Run, 1)
	go func() {
		run, err := r.e.Run(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- run
	}()
	spec, _, tok := m.take(ctx)
	key := cluster.Key(spec.ID)
	send := func(typ string, data map[string]any) {
		b, _ := json.Marshal(cluster.Event{Attempt: spec.ID, Worker: "mallory", Token: tok, TS: time.Now().UTC(), Type: typ, Data: data})
		if _, err := m.h.JS.Publish(ctx, cluster.EventsSubject(key, "mallory"), b); err != nil {
			t.Fatal(err)
		}
	}
	forged := []string{record.EvClusterEgressLog, record.EvClusterClaimed, record.EvClusterObjectRefused, record.EvClusterLost,
		record.EvClusterEventRefused, record.EvBranchAdvanced, record.EvHeadsMoved, record.EvGateApproved, record.EvStepFinished,
		record.EvRunFinished, record.EvAttemptFinished, record.EvCommitted, record.EvDeliverPushed, record.EvFixFinished,
		// Types kusaw does not know, some in areas a worker writes.
		"zzz.new", "cluster.claimed2", "process.exited_ok", "provider.verdict"}
	for _, typ := range forged {
		send(typ, map[string]any{"verified": true, "forged": "by-mallory"})
	}
	send(record.EvProcessStarted, map[string]any{"pid": 4242, "genuine": "yes"})
	send(record.EvProviderText, map[string]any{"text": "working", "genuine": "yes"})
	send(record.EvProviderTool, map[string]any{"name": "Bash", "genuine": "yes"})
	send(record.EvEgressSummary, map[string]any{"hosts": []any{}, "genuine": "yes"})
	send(record.EvProcessExited, map[string]any{"exit_code": 0, "genuine": "yes"})
	res := cluster.Result{Heads: map[string]string{}, Bundles: map[string]string{}, Files: map[string]string{}, Digests: map[string]string{}}
	m.report(ctx, spec, tok, res)
	run := <-done
	if run == nil {
		t.FailNow()
	}
	b, err := os.ReadFile(filepath.Join(record.AttemptDir(run.Dir, spec.Step, spec.Number), record.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		var ev record.Event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == record.EvClusterEventRefused && ev.Str("worker") == "mallory" {
			refused[ev.Str("type")] = ev.Str("why")
		}
	}
	for _, typ := range forged {
		want := "serve's own"
		if _, known := record.LookupEventType(typ); !known {
			want = "unknown"
		}
		if refused[typ] != want {
			t.Errorf("%s: refusal recorded as %q, want %q", typ, refused[typ], want)
		}
	}
	if len(refused) != len(forged) {
		t.Errorf("%d types recorded as refused, want %d: %v", len(refused), len(forged), refused)
	}
	genuine := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "by-mallory") {
			t.Errorf("serve wrote a forged event: %s", line)
		}
		if strings.Contains(line, `"genuine":"yes"`) && strings.Contains(line, `"worker":"mallory"`) {
			genuine++
		}
	}
	if genuine != 5 {
		t.Errorf("%d of the holder's own events written, want 5:\n%s", genuine, b)
	}
}
