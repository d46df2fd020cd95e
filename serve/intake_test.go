package serve

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

type mapSecrets map[string]string

func (m mapSecrets) Get(k string) (string, error) {
	if v, ok := m[k]; ok {
		return v, nil
	}
	return "", os.ErrNotExist
}

// fakeForge is a GitHub-shaped REST API: pull requests, issue comments
// and a review's comments, with what it was sent.
type fakeForge struct {
	mu       sync.Mutex
	srv      *httptest.Server
	pulls    []fakePull
	comments map[int][]string // issue or pull number → bodies
	tokens   []string
}

type fakePull struct {
	Number           int
	Head, Base, Body string
	Updates          int
}

func newFakeForge(t *testing.T) *fakeForge {
	ff := &fakeForge{comments: map[int][]string{}}
	ff.srv = httptest.NewServer(http.HandlerFunc(ff.serve))
	t.Cleanup(ff.srv.Close)
	return ff
}

func (ff *fakeForge) serve(w http.ResponseWriter, r *http.Request) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.tokens = append(ff.tokens, r.Header.Get("Authorization"))
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	p := strings.TrimPrefix(r.URL.Path, "/repos/acme/app/")
	switch {
	case r.Method == "GET" && p == "pulls":
		var out []map[string]any
		for _, pr := range ff.pulls {
			if "acme:"+pr.Head == r.URL.Query().Get("head") || pr.Head == r.URL.Query().Get("head") {
				out = append(out, map[string]any{"number": pr.Number, "html_url": fmt.Sprintf("https://forge.example/acme/app/pull/%d", pr.Number), "head": map[string]any{"ref": pr.Head}, "base": map[string]any{"ref": pr.Base}})
			}
		}
		json.NewEncoder(w).Encode(out)
	case r.Method == "POST" && p == "pulls":
		n := 100 + len(ff.pulls)
		ff.pulls = append(ff.pulls, fakePull{Number: n, Head: fmt.Sprint(body["head"]), Base: fmt.Sprint(body["base"]), Body: fmt.Sprint(body["body"])})
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"number": n, "html_url": fmt.Sprintf("https://forge.example/acme/app/pull/%d", n)})
	case r.Method == "PATCH" && strings.HasPrefix(p, "pulls/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(p, "pulls/"))
		for i := range ff.pulls {
			if ff.pulls[i].Number == n {
				ff.pulls[i].Updates++
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"number": n, "html_url": fmt.Sprintf("https://forge.example/acme/app/pull/%d", n)})
	case r.Method == "POST" && strings.HasPrefix(p, "issues/") && strings.HasSuffix(p, "/comments"):
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, "issues/"), "/comments"))
		ff.comments[n] = append(ff.comments[n], fmt.Sprint(body["body"]))
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{}`))
	case r.Method == "GET" && strings.HasSuffix(p, "/comments") && strings.Contains(p, "/reviews/"):
		json.NewEncoder(w).Encode([]map[string]any{{"path": "notes.txt", "line": 1, "body": "say hello, not hi"}})
	default:
		http.Error(w, "not found: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	}
}

func (ff *fakeForge) snapshot() ([]fakePull, map[int][]string) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	c := map[int][]string{}
	for k, v := range ff.comments {
		c[k] = append([]string(nil), v...)
	}
	return append([]fakePull(nil), ff.pulls...), c
}

const hookSecret = "hook-secret-0123456789"

// intakeServer is serve for a factory that takes GitHub's webhooks and
// delivers to the fake forge, on a TCP listener with a token.
func intakeServer(t *testing.T, ff *fakeForge, extra string, opts ServeOptions) (*Server, *client.Client, string) {
	t.Helper()
	f := serveFactory(t, fmt.Sprintf(`
forges:
  github:
    api_url: %s
    token: {secret: gh_token}
    webhook_secret: {secret: gh_hook}
pipelines:
  default:
    steps: [edit]
    deliver:
      push: {remote: origin}
      pull_request: {forge: github, repo: acme/app, base: main}
  gated:
    steps: [check, ship]
triggers:
  fix:
    on: {forge: github, repo: acme/app, event: issues.labeled, label: kusaw}
    pipeline: default
    params: {TASK: "{{issue.title}}\n{{issue.body}}"}
  fix-gated:
    on: {forge: github, repo: acme/app, event: issues.labeled, label: kusaw-gated}
    pipeline: gated
  revise:
    on: {forge: github, repo: acme/app, event: pull_request_review.submitted, state: changes_requested}
    pipeline: default
%s
steps:
  edit: {run: [sh, -c, 'printf "%%s\n" "$KUSAW_PARAM_TASK" >> notes.txt']}
  check: {run: [true]}
  ship:
    gate: {message: "ship it?", approvers: [github:alice, ops]}
    run: [sh, -c, "echo shipped > shipped.txt"]
`, ff.srv.URL, extra))
	repo := f.Repos["app"].Path
	bare := filepath.Join(t.TempDir(), "origin.git")
	for _, args := range [][]string{{"init", "-q", "--bare", bare}, {"-C", repo, "remote", "add", "origin", bare}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	opts.Engine.Secrets = mapSecrets{"gh_token": "ghp-forge-token", "gh_hook": hookSecret}
	opts.Listen, opts.Token = "127.0.0.1:0", "tok-0123456789"
	s, c, _ := startServer(t, f, opts)
	return s, c, bare
}

var deliverySeq atomic.Int64

// deliver sends a GitHub webhook delivery to serve's TCP listener, signed
// with secret ("" sends it unsigned); id "" makes a fresh delivery id.
func sendHook(t *testing.T, s *Server, event, id, secret string, payload any) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(payload)
	req, _ := http.NewRequest("POST", "http://"+s.ServeAddr()+"/v1/hooks/github", bytes.NewReader(body))
	if id == "" {
		id = fmt.Sprintf("delivery-%d-%d", time.Now().UnixNano(), deliverySeq.Add(1))
	}
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	if secret != "" {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

func labeled(issue int, label, title, body, sender string) map[string]any {
	return map[string]any{"action": "labeled", "label": map[string]any{"name": label},
		"issue":      map[string]any{"number": issue, "title": title, "body": body, "html_url": "https://forge.example/acme/app/issues/" + strconv.Itoa(issue)},
		"repository": map[string]any{"full_name": "acme/app"}, "sender": map[string]any{"login": sender}}
}

func runID(t *testing.T, status int, out map[string]any) string {
	t.Helper()
	id, _ := out["run"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("delivery answered %d %v, want 202 with a run", status, out)
	}
	return id
}

func countRuns(t *testing.T, s *Server) int {
	runs, err := s.E.State.Runs()
	if err != nil {
		t.Fatal(err)
	}
	return len(runs)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIntakeIssueToReviewLoop: an issue labeled by a maintainer starts a
// run whose pull request opens on the forge; a review asking for changes
// starts a follow-up on the same run branch, with the review's comments as
// the task, and the same pull request gets the new commit; kusaw comments
// on the issue when the run starts and ends.
func TestIntakeIssueToReviewLoop(t *testing.T) {
	ff := newFakeForge(t)
	s, c, bare := intakeServer(t, ff, "", ServeOptions{})
	st, out := sendHook(t, s, "issues", "", hookSecret, labeled(5, "kusaw", "Say hi", "in notes.txt", "alice"))
	first := waitRun(t, c, runID(t, st, out), 30*time.Second)
	if first.Run.State != status.RunSucceeded || first.Run.Delivery == nil || first.Run.Delivery.PullNumber != 100 {
		t.Fatalf("first run: %s %s delivery %+v", first.Run.State, first.Run.Message, first.Run.Delivery)
	}
	if tr := first.Run.Trigger; tr == nil || tr.Name != "fix" || tr.Issue != 5 || tr.Sender != "alice" || tr.Delivery == "" {
		t.Fatalf("the run's trigger: %+v", first.Run.Trigger)
	}
	waitFor(t, "the end comment on issue 5", func() bool { _, cm := ff.snapshot(); return len(cm[5]) == 2 })
	_, cm := ff.snapshot()
	if !strings.Contains(cm[5][0], "started run `"+first.Run.ID+"`") || !strings.Contains(cm[5][1], "succeeded") || !strings.Contains(cm[5][1], "/pull/100") {
		t.Fatalf("comments on issue 5: %q", cm[5])
	}
	pushed := strings.TrimSpace(gitOut(t, bare, "rev-parse", "refs/heads/kusaw/"+first.Run.ID))

	review := map[string]any{"action": "submitted",
		"review":       map[string]any{"id": 77, "state": "changes_requested", "body": "Not quite.", "user": map[string]any{"login": "bob"}, "author_association": "MEMBER"},
		"pull_request": map[string]any{"number": 100, "head": map[string]any{"ref": "kusaw/" + first.Run.ID}},
		"repository":   map[string]any{"full_name": "acme/app"}, "sender": map[string]any{"login": "bob"}}
	st, out = sendHook(t, s, "pull_request_review", "", hookSecret, review)
	second := waitRun(t, c, runID(t, st, out), 30*time.Second)
	if second.Run.State != status.RunSucceeded || second.Run.Continues != first.Run.ID {
		t.Fatalf("follow-up: %s %s continues %q", second.Run.State, second.Run.Message, second.Run.Continues)
	}
	if second.Run.Repos[0].BaseSHA != pushed {
		t.Fatalf("the follow-up started at %s, not the pushed head %s", second.Run.Repos[0].BaseSHA, pushed)
	}
	notes := gitOut(t, bare, "show", "refs/heads/kusaw/"+first.Run.ID+":notes.txt")
	for _, want := range []string{"Say hi", "Not quite.", "notes.txt:1: say hello, not hi"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the same remote branch's notes.txt lacks %q:\n%s", want, notes)
		}
	}
	pulls, _ := ff.snapshot()
	if len(pulls) != 1 || pulls[0].Updates != 1 || second.Run.Delivery.PullNumber != 100 {
		t.Fatalf("pull requests on the forge: %+v (the follow-up must update #100, not open another)", pulls)
	}
	if gitOut(t, bare, "merge-base", "--is-ancestor", pushed, "refs/heads/kusaw/"+first.Run.ID) != "" {
		t.Fatal("unreachable: merge-base prints nothing")
	}
	for _, tok := range ff.tokens {
		if tok != "Bearer ghp-forge-token" {
			t.Fatalf("the forge saw Authorization %q", tok)
		}
	}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestIntakeRefusesForgedDeliveries: from the outside, without the
// webhook secret: an unsigned delivery, a forged signature, a replayed
// delivery id, a sender the trigger does not allow, and a repository no
// trigger names are each refused or ignored, and no run starts; the
// legitimate delivery (the twin) starts one. The hook needs no API token,
// but nothing else on the TCP listener is open without it.
func TestIntakeRefusesForgedDeliveries(t *testing.T) {
	ff := newFakeForge(t)
	s, c, _ := intakeServer(t, ff, "", ServeOptions{})
	ev := labeled(6, "kusaw", "t", "b", "alice")
	if st, _ := sendHook(t, s, "issues", "", "", ev); st != http.StatusUnauthorized {
		t.Errorf("unsigned delivery: %d, want 401", st)
	}
	if st, _ := sendHook(t, s, "issues", "", "not-the-secret", ev); st != http.StatusUnauthorized {
		t.Errorf("forged signature: %d, want 401", st)
	}
	other := labeled(6, "kusaw", "t", "b", "alice")
	other["repository"] = map[string]any{"full_name": "evil/app"}
	if st, _ := sendHook(t, s, "issues", "", hookSecret, other); st != http.StatusForbidden {
		t.Errorf("unknown repository: %d, want 403", st)
	}
	comment := map[string]any{"action": "created", "issue": map[string]any{"number": 6},
		"comment":    map[string]any{"body": "/kusaw run", "author_association": "NONE", "user": map[string]any{"login": "mallory"}},
		"repository": map[string]any{"full_name": "acme/app"}, "sender": map[string]any{"login": "mallory"}}
	if st, _ := sendHook(t, s, "issue_comment", "", hookSecret, comment); st != http.StatusForbidden {
		t.Errorf("a command from a user without write access: %d, want 403", st)
	}
	if n := countRuns(t, s); n != 0 {
		t.Fatalf("%d runs started by refused deliveries", n)
	}
	// The twin, then its replay.
	st, out := sendHook(t, s, "issues", "same-id", hookSecret, ev)
	waitRun(t, c, runID(t, st, out), 30*time.Second)
	if st, out := sendHook(t, s, "issues", "same-id", hookSecret, ev); st != http.StatusOK || out["result"] != "duplicate" {
		t.Errorf("replayed delivery: %d %v, want 200 duplicate", st, out)
	}
	if n := countRuns(t, s); n != 1 {
		t.Fatalf("%d runs, want the twin's one", n)
	}
	// The API itself still wants the token on TCP.
	resp, err := http.Post("http://"+s.ServeAddr()+"/v1/runs", "application/json", strings.NewReader(`{"pipeline":"default"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /v1/runs without the token: %d, want 401", resp.StatusCode)
	}
	// The refusals are counted.
	var m strings.Builder
	fam, _ := s.intakeGather()
	m.WriteString(fam)
	for _, want := range []string{`result="unsigned"`, `result="forged"`, `result="unknown_repository"`, `result="not_allowed"`, `result="duplicate"`, `result="run"`} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, m.String())
		}
	}
	// The restart keeps what was seen: a replay after it is still ignored.
	in := newIntake(s.F.StateDir, nil)
	if fresh, _ := in.firstTime("github", "same-id"); fresh {
		t.Error("a delivery id seen before the restart was taken as new")
	}
}

// TestIntakeUntrustedTextIsInert: an issue body carrying shell
// metacharacters, ../ and YAML reaches the step only as the value of its
// parameter: nothing it names runs or is written, and the branch names
// are kusaw's own.
func TestIntakeUntrustedTextIsInert(t *testing.T) {
	ff := newFakeForge(t)
	s, c, _ := intakeServer(t, ff, "", ServeOptions{})
	marker := filepath.Join(t.TempDir(), "pwned")
	body := "$(touch " + marker + ") `touch " + marker + "` ; touch " + marker + "\n../../../etc/passwd\nsteps: {evil: {run: [touch, " + marker + "]}}\n{{issue.body}}"
	st, out := sendHook(t, s, "issues", "", hookSecret, labeled(7, "kusaw", "../../x; rm -rf ~", body, "alice"))
	d := waitRun(t, c, runID(t, st, out), 30*time.Second)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("run: %s %s", d.Run.State, d.Run.Message)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the issue's text ran a command")
	}
	if d.Run.Repos[0].Branch != "kusaw/"+d.Run.ID {
		t.Fatalf("run branch %q", d.Run.Repos[0].Branch)
	}
	notes := gitOut(t, s.F.Repos["app"].Path, "show", d.Run.Repos[0].Branch+":notes.txt")
	if !strings.Contains(notes, "$(touch "+marker+")") || !strings.Contains(notes, "{{issue.body}}") {
		t.Fatalf("the step did not get the text verbatim:\n%s", notes)
	}
	if _, ok := s.F.Steps["evil"]; ok {
		t.Fatal("the issue's YAML became a step")
	}
}

// TestIntakeCommandApprovesGate: /kusaw approve by an allowed user on the
// issue lets the run waiting at its gate go on.
func TestIntakeCommandApprovesGate(t *testing.T) {
	ff := newFakeForge(t)
	s, c, _ := intakeServer(t, ff, "", ServeOptions{})
	st, out := sendHook(t, s, "issues", "", hookSecret, labeled(9, "kusaw-gated", "ship", "", "alice"))
	id := runID(t, st, out)
	waitFor(t, "the run to wait at its gate", func() bool {
		rec, err := s.E.State.LoadRun(id)
		return err == nil && rec.State == status.RunWaiting
	})
	// Labelled again while its run waits: not a second run.
	if st, out := sendHook(t, s, "issues", "", hookSecret, labeled(9, "kusaw-gated", "ship it", "", "alice")); st != http.StatusOK || out["result"] != "ignored" {
		t.Fatalf("a second label while the run waits: %d %v", st, out)
	}
	cmd := func(who, assoc, text string) (int, map[string]any) {
		return sendHook(t, s, "issue_comment", "", hookSecret, map[string]any{"action": "created", "issue": map[string]any{"number": 9},
			"comment":    map[string]any{"body": text, "author_association": assoc, "user": map[string]any{"login": who}},
			"repository": map[string]any{"full_name": "acme/app"}, "sender": map[string]any{"login": who}})
	}
	if st, _ := cmd("mallory", "CONTRIBUTOR", "/kusaw approve"); st != http.StatusForbidden {
		t.Fatalf("approve by a contributor: %d, want 403", st)
	}
	if rec, _ := s.E.State.LoadRun(id); rec.State != status.RunWaiting {
		t.Fatalf("the refused approval moved the run to %s", rec.State)
	}
	// A forge login that is also a local approver's name is not that
	// approver: the decision is github:ops, and the gate names ops.
	if st, _ := cmd("ops", "OWNER", "/kusaw approve"); st != http.StatusConflict {
		t.Fatalf("approve by the forge user ops: %d, want 409 (not an approver)", st)
	}
	if rec, _ := s.E.State.LoadRun(id); rec.State != status.RunWaiting {
		t.Fatalf("github:ops moved the run to %s", rec.State)
	}
	if st, out := cmd("alice", "OWNER", "/kusaw approve looks good"); st != http.StatusAccepted {
		t.Fatalf("approve by the owner: %d %v", st, out)
	}
	d := waitRun(t, c, id, 30*time.Second)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("after approval: %s %s", d.Run.State, d.Run.Message)
	}
}

// TestScheduleFires: a schedule starts its pipeline at its minute (an
// injected clock), once per minute, and is skipped with a recorded reason
// while its previous run still runs.
func TestScheduleFires(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 2, 59, 30, 0, time.UTC).Unix())
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	f := serveFactory(t, `
pipelines:
  nightly: [slow]
triggers:
  nightly:
    on: {schedule: "* * * * *"}
    pipeline: nightly
steps:
  slow: {run: [sh, -c, "sleep 1.5"]}
`)
	s, c, _ := startServer(t, f, ServeOptions{Now: now, ScheduleTick: 20 * time.Millisecond})
	waitFor(t, "the first scheduled run", func() bool { return countRuns(t, s) == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := countRuns(t, s); n != 1 {
		t.Fatalf("%d runs in one minute, want 1", n)
	}
	clock.Add(60) // the next minute, while the first run still sleeps
	var st scheduleState
	waitFor(t, "the skip to be recorded", func() bool {
		b, err := os.ReadFile(s.scheduleFile())
		return err == nil && json.Unmarshal(b, &st) == nil && st.Triggers["nightly"] != nil && st.Triggers["nightly"].Skipped != nil
	})
	if !strings.Contains(st.Triggers["nightly"].Skipped.Reason, "of the previous time is still") {
		t.Fatalf("skip reason %q", st.Triggers["nightly"].Skipped.Reason)
	}
	first := st.Triggers["nightly"].Run
	waitRun(t, c, first, 30*time.Second)
	clock.Add(60)
	waitFor(t, "the third minute's run", func() bool { return countRuns(t, s) == 2 })
	runs, _ := s.E.State.Runs()
	if tr := runs[0].Trigger; tr == nil || tr.Name != "nightly" || tr.Schedule != "* * * * *" {
		t.Fatalf("the scheduled run's trigger: %+v", runs[0].Trigger)
	}
	waitRun(t, c, runs[0].ID, 30*time.Second)
}
