package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeGitHub is a small GitHub pulls API: it records each request and keeps
// the open pull requests.
type fakeGitHub struct {
	mu    sync.Mutex
	calls []string // METHOD path auth
	posts []map[string]any
	open  map[string]int
}

func (g *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	json.Unmarshal(b, &body)
	if r.Header.Get("Authorization") != "Bearer gh-token-e2e" {
		w.WriteHeader(401)
		return
	}
	switch r.Method {
	case "GET":
		var list []map[string]any
		for head, n := range g.open {
			list = append(list, map[string]any{"number": n, "html_url": "https://forge.example/acme/app/pull/1", "head": map[string]any{"ref": head}, "base": map[string]any{"ref": "main"}})
		}
		json.NewEncoder(w).Encode(list)
	case "POST":
		g.posts = append(g.posts, body)
		if g.open == nil {
			g.open = map[string]int{}
		}
		g.open[body["head"].(string)] = 1
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(map[string]any{"number": 1, "html_url": "https://forge.example/acme/app/pull/1"})
	case "PATCH":
		json.NewEncoder(w).Encode(map[string]any{"number": 1, "html_url": "https://forge.example/acme/app/pull/1"})
	}
}

// TestDeliverMergePushPullRequest: a run's deliver fast-forwards main, pushes
// to a bare remote and opens a pull request on a fake GitHub; kusaw deliver
// again updates the same pull request. The token never reaches a record.
func TestDeliverMergePushPullRequest(t *testing.T) {
	gh := &fakeGitHub{}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default:
    steps: [work]
    deliver:
      merge: {into: main}
      push: {remote: origin}
      pull_request:
        forge: github
        api_url: `+srv.URL+`
        repo: acme/app
        base: main
        token: {secret: gh_token}
steps:
  work:
    run: [sh, -c, 'echo done > work.txt']
`, "app")
	app := filepath.Join(dir, "app")
	bare := filepath.Join(dir, "remote.git")
	git(t, dir, "init", "-q", "--bare", bare)
	git(t, app, "remote", "add", "origin", bare)
	set := exec.Command(kusawBin, "config", "set", "gh_token", "--secret")
	set.Dir, set.Env, set.Stdin = dir, testEnv(t, dir), strings.NewReader("gh-token-e2e\n")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("config set --secret: %v\n%s", err, out)
	}

	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	runBranch := git(t, app, "rev-parse", "kusaw/"+id)
	if got := git(t, app, "rev-parse", "main"); got != runBranch {
		t.Fatalf("main is %s, want the run branch %s (ff-only)", got, runBranch)
	}
	if got := readFile(t, filepath.Join(app, "work.txt")); got != "done\n" {
		t.Fatalf("main's checkout did not follow: %q", got)
	}
	if got := git(t, bare, "rev-parse", "kusaw/"+id); got != runBranch {
		t.Fatalf("remote kusaw/%s is %s", id, got)
	}
	if len(gh.posts) != 1 || gh.posts[0]["head"] != "kusaw/"+id || gh.posts[0]["base"] != "main" || !strings.Contains(gh.posts[0]["title"].(string), id) {
		t.Fatalf("pull request posted: %v", gh.posts)
	}
	if body, _ := gh.posts[0]["body"].(string); !strings.Contains(body, "| work | passed | 1 |") || !strings.Contains(body, "work.txt") {
		t.Fatalf("pull request body lacks the run summary:\n%s", body)
	}
	if !strings.Contains(strings.Join(gh.calls, "\n"), "POST /repos/acme/app/pulls Bearer gh-token-e2e") {
		t.Fatalf("calls: %v", gh.calls)
	}
	runJSON := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"))
	for _, want := range []string{`"state": "succeeded"`, `"pull_request_url": "https://forge.example/acme/app/pull/1"`, `"pushed": "origin/kusaw/` + id + `"`} {
		if !strings.Contains(runJSON, want) {
			t.Errorf("run.json lacks %s:\n%s", want, runJSON)
		}
	}
	events := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "events.jsonl"))
	for _, typ := range []string{"deliver.merged", "deliver.pushed", "deliver.pull_request"} {
		if !strings.Contains(events, `"type":"`+typ+`"`) {
			t.Errorf("events lack %s", typ)
		}
	}

	// Again: the same pull request is updated, nothing else changes.
	again := runKusaw(t, dir, "deliver", id)
	if again.code != 0 || !strings.Contains(again.stdout, "pull request: https://forge.example/acme/app/pull/1") {
		t.Fatalf("kusaw deliver: exit %d\n%s\n%s", again.code, again.stdout, again.stderr)
	}
	if len(gh.posts) != 1 || !strings.Contains(strings.Join(gh.calls, "\n"), "PATCH /repos/acme/app/pulls/1") {
		t.Fatalf("second delivery did not update the pull request: %v", gh.calls)
	}
	if v := runKusaw(t, dir, "log", "verify", "--strict", filepath.Join(dir, ".kusaw", "runs", id, "events.jsonl")); v.code != 0 {
		t.Fatalf("log verify after deliver: %s%s", v.stdout, v.stderr)
	}
	if hits := grepDir(t, filepath.Join(dir, ".kusaw"), "gh-token-e2e"); len(hits) > 0 {
		t.Fatalf("the forge token is in records: %v", hits)
	}
}

// TestDeliverFailedPushKeepsRunSucceeded: a push that fails leaves the run
// succeeded, with the delivery failed and why; kusaw deliver says so with
// its own exit code.
func TestDeliverFailedPushKeepsRunSucceeded(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default:
    steps: [work]
    deliver:
      push: {remote: nowhere, branch: "review/{pipeline}-{run}"}
steps:
  work:
    run: [sh, -c, 'echo done > work.txt']
`, "app")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d (a failed delivery must not fail the run)\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	var rec struct {
		State    string
		Delivery struct {
			State   string
			Failed  string `json:"failed_step"`
			Message string
		}
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"))), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != "succeeded" || rec.Delivery.State != "failed" || rec.Delivery.Failed != "push" || !strings.Contains(rec.Delivery.Message, "nowhere") {
		t.Fatalf("run.json: %+v", rec)
	}
	if show := runKusaw(t, dir, "show", id); !strings.Contains(show.stdout, "delivery (app): failed") || !strings.Contains(show.stdout, "push failed:") {
		t.Fatalf("kusaw show does not say the delivery failed:\n%s", show.stdout)
	}
	again := runKusaw(t, dir, "deliver", id)
	if again.code != 9 || !strings.Contains(again.stderr, "delivery failed at push") {
		t.Fatalf("kusaw deliver of a failing push: exit %d\n%s", again.code, again.stderr)
	}
}
