package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
)

var id = []string{"-c", "user.name=kusaw", "-c", "user.email=kusaw@example.invalid"}

// repo makes a repository on main with one commit, and a run branch with
// one more commit that adds file.
func repo(t *testing.T, file, content string) string {
	t.Helper()
	testkit.NeedGit(t)
	dir := filepath.Join(t.TempDir(), "app")
	os.MkdirAll(dir, 0o755)
	testkit.GitRun(t, dir, "init", "-q", "-b", "main")
	testkit.GitRun(t, dir, "config", "user.email", "t@example.invalid")
	testkit.GitRun(t, dir, "config", "user.name", "t")
	os.WriteFile(filepath.Join(dir, "README"), []byte("app\n"), 0o644)
	testkit.GitRun(t, dir, "add", ".")
	testkit.GitRun(t, dir, "commit", "-qm", "init")
	testkit.GitRun(t, dir, "branch", "kusaw/r1")
	wt := filepath.Join(t.TempDir(), "wt")
	testkit.GitRun(t, dir, "worktree", "add", "-q", wt, "kusaw/r1")
	os.WriteFile(filepath.Join(wt, file), []byte(content), 0o644)
	testkit.GitRun(t, wt, "add", ".")
	testkit.GitRun(t, wt, "commit", "-qm", "run work")
	testkit.GitRun(t, dir, "worktree", "remove", "--force", wt)
	return dir
}

func plan(dir string) Plan {
	return Plan{RunID: "r1", RepoPath: dir, RunBranch: "kusaw/r1", Identity: id}
}

func TestMergeFastForwardIntoCheckout(t *testing.T) {
	dir := repo(t, "work.txt", "done\n")
	p := plan(dir)
	p.Merge = &Merge{Into: "main"}
	var seen []string
	res, err := Run(context.Background(), p, func(step string, d map[string]any, err error) { seen = append(seen, step) })
	if err != nil {
		t.Fatal(err)
	}
	if got := testkit.GitRun(t, dir, "rev-parse", "main"); got != testkit.GitRun(t, dir, "rev-parse", "kusaw/r1") || res.Merged != got {
		t.Fatalf("main is %s, run branch %s, result %s", got, testkit.GitRun(t, dir, "rev-parse", "kusaw/r1"), res.Merged)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "work.txt")); err != nil || string(b) != "done\n" {
		t.Fatalf("the checkout did not follow its branch: %q %v", b, err)
	}
	// Again: nothing to do, and it says so.
	var already any
	if _, err := Run(context.Background(), p, func(step string, d map[string]any, err error) { already = d["already"] }); err != nil || already != true {
		t.Fatalf("second delivery: %v, already=%v", err, already)
	}
	if strings.Join(seen, ",") != "merged" {
		t.Fatalf("steps observed: %v", seen)
	}
}

func TestMergeRefusesDirtyCheckout(t *testing.T) {
	dir := repo(t, "work.txt", "done\n")
	os.WriteFile(filepath.Join(dir, "README"), []byte("local edit\n"), 0o644)
	before := testkit.GitRun(t, dir, "rev-parse", "main")
	p := plan(dir)
	p.Merge = &Merge{Into: "main"}
	_, err := Run(context.Background(), p, nil)
	var se *StepError
	if !errors.As(err, &se) || se.Step != "merge" || !strings.Contains(err.Error(), "uncommitted changes") {
		t.Fatalf("want a merge refusal naming uncommitted changes, got %v", err)
	}
	if testkit.GitRun(t, dir, "rev-parse", "main") != before {
		t.Fatal("main moved although its checkout was dirty")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README")); string(b) != "local edit\n" {
		t.Fatal("the user's edit was lost")
	}
}

// diverge adds a commit to main that the run branch lacks.
func diverge(t *testing.T, dir, file, content string) {
	os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644)
	testkit.GitRun(t, dir, "add", ".")
	testkit.GitRun(t, dir, "commit", "-qm", "main moved on")
	testkit.GitRun(t, dir, "checkout", "-q", "--detach") // main no longer checked out
}

func TestMergeAndSquashOutsideACheckout(t *testing.T) {
	for _, how := range []string{HowMerge, HowSquash} {
		t.Run(how, func(t *testing.T) {
			dir := repo(t, "work.txt", "done\n")
			diverge(t, dir, "other.txt", "other\n")
			p := plan(dir)
			p.Merge = &Merge{Into: "main", How: how}
			res, err := Run(context.Background(), p, nil)
			if err != nil {
				t.Fatal(err)
			}
			files := testkit.GitRun(t, dir, "ls-tree", "--name-only", "main")
			if !strings.Contains(files, "work.txt") || !strings.Contains(files, "other.txt") || res.Merged != testkit.GitRun(t, dir, "rev-parse", "main") {
				t.Fatalf("main after %s: %s", how, files)
			}
			parents := strings.Fields(testkit.GitRun(t, dir, "log", "-1", "--format=%P", "main"))
			if want := map[string]int{HowMerge: 2, HowSquash: 1}[how]; len(parents) != want {
				t.Fatalf("%s commit has %d parents, want %d", how, len(parents), want)
			}
			if wts := testkit.GitRun(t, dir, "worktree", "list"); strings.Count(wts, "\n") != 0 {
				t.Fatalf("a temporary worktree was left: %s", wts)
			}
			// Idempotent: the squash is found by its trailer.
			head := testkit.GitRun(t, dir, "rev-parse", "main")
			if _, err := Run(context.Background(), p, nil); err != nil || testkit.GitRun(t, dir, "rev-parse", "main") != head {
				t.Fatalf("second %s delivery: %v, main moved", how, err)
			}
		})
	}
}

func TestMergeConflictNamesFilesAndLeavesTarget(t *testing.T) {
	dir := repo(t, "README", "run's version\n")
	diverge(t, dir, "README", "main's version\n")
	before := testkit.GitRun(t, dir, "rev-parse", "main")
	p := plan(dir)
	p.Merge = &Merge{Into: "main", How: HowMerge}
	_, err := Run(context.Background(), p, nil)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "README") {
		t.Fatalf("want a conflict naming README, got %v", err)
	}
	if testkit.GitRun(t, dir, "rev-parse", "main") != before {
		t.Fatal("main moved on a conflict")
	}
	// ff-only says why it cannot.
	p.Merge.How = HowFFOnly
	if _, err := Run(context.Background(), p, nil); err == nil || !strings.Contains(err.Error(), "cannot fast-forward") {
		t.Fatalf("ff-only on a diverged target: %v", err)
	}
}

func TestPushToBareRemote(t *testing.T) {
	dir := repo(t, "work.txt", "done\n")
	bare := filepath.Join(t.TempDir(), "remote.git")
	testkit.GitRun(t, dir, "init", "-q", "--bare", bare)
	testkit.GitRun(t, dir, "remote", "add", "origin", bare)
	p := plan(dir)
	p.Push = &Push{Remote: "origin", Branch: "kusaw/r1"}
	for i := 0; i < 2; i++ { // the second push changes nothing
		if _, err := Run(context.Background(), p, nil); err != nil {
			t.Fatalf("push %d: %v", i+1, err)
		}
	}
	if got := testkit.GitRun(t, bare, "rev-parse", "kusaw/r1"); got != testkit.GitRun(t, dir, "rev-parse", "kusaw/r1") {
		t.Fatalf("remote has %s", got)
	}
	p.Push.Remote = "nowhere"
	_, err := Run(context.Background(), p, nil)
	var se *StepError
	if !errors.As(err, &se) || se.Step != "push" {
		t.Fatalf("push to a missing remote: %v", err)
	}
}

// fakeForge records requests and keeps pull requests like a forge would.
type fakeForge struct {
	mu     sync.Mutex
	calls  []string // "METHOD path auth"
	bodies []map[string]any
	open   map[string]int // head → number
}

func (f *fakeForge) handler(forge string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		auth := r.Header.Get("Authorization") + r.Header.Get("PRIVATE-TOKEN")
		f.calls = append(f.calls, r.Method+" "+r.URL.EscapedPath()+" "+auth)
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &body)
		f.bodies = append(f.bodies, body)
		if !strings.HasSuffix(auth, "tok-123") {
			w.WriteHeader(401)
			w.Write([]byte(`{"message":"Bad credentials"}`))
			return
		}
		headKey, baseKey, numKey, urlKey := "head", "base", "number", "html_url"
		if forge == ForgeGitLab {
			headKey, baseKey, numKey, urlKey = "source_branch", "target_branch", "iid", "web_url"
		}
		switch r.Method {
		case "GET":
			var list []map[string]any
			for h, n := range f.open {
				if forge == ForgeGitLab {
					if r.URL.Query().Get("source_branch") != h {
						continue
					}
					list = append(list, map[string]any{"iid": n, "web_url": "http://forge/pr/1"})
				} else {
					list = append(list, map[string]any{"number": n, "html_url": "http://forge/pr/1", "head": map[string]any{"ref": h}, "base": map[string]any{"ref": "main"}})
				}
			}
			json.NewEncoder(w).Encode(list)
		case "POST":
			if f.open == nil {
				f.open = map[string]int{}
			}
			f.open[body[headKey].(string)] = 7
			_ = baseKey
			w.WriteHeader(201)
			json.NewEncoder(w).Encode(map[string]any{numKey: 7, urlKey: "http://forge/pr/7"})
		case "PATCH", "PUT":
			json.NewEncoder(w).Encode(map[string]any{numKey: 7, urlKey: "http://forge/pr/7"})
		}
	})
}

func TestPullRequestOpenThenUpdate(t *testing.T) {
	cases := map[string]struct{ repo, create, update, list string }{
		ForgeGitHub: {"acme/app", "POST /api/repos/acme/app/pulls Bearer tok-123", "PATCH /api/repos/acme/app/pulls/7 Bearer tok-123", "GET /api/repos/acme/app/pulls"},
		ForgeGitea:  {"acme/app", "POST /api/repos/acme/app/pulls token tok-123", "PATCH /api/repos/acme/app/pulls/7 token tok-123", "GET /api/repos/acme/app/pulls"},
		ForgeGitLab: {"group/sub/app", "POST /api/projects/group%2Fsub%2Fapp/merge_requests tok-123", "PUT /api/projects/group%2Fsub%2Fapp/merge_requests/7 tok-123", "GET /api/projects/group%2Fsub%2Fapp/merge_requests"},
	}
	for forge, c := range cases {
		t.Run(forge, func(t *testing.T) {
			ff := &fakeForge{}
			srv := httptest.NewServer(ff.handler(forge))
			defer srv.Close()
			pr := PullRequest{Forge: forge, APIURL: srv.URL + "/api", Repo: c.repo, Base: "main", Head: "kusaw/r1", Token: "tok-123", Title: "kusaw run r1", Body: "summary"}
			url, n, created, err := openPullRequest(context.Background(), pr)
			if err != nil || !created || n != 7 || url != "http://forge/pr/7" {
				t.Fatalf("open: %s %d %v %v", url, n, created, err)
			}
			_, n, created, err = openPullRequest(context.Background(), pr)
			if err != nil || created || n != 7 {
				t.Fatalf("second: %d %v %v", n, created, err)
			}
			calls := strings.Join(ff.calls, "\n")
			for _, want := range []string{c.create, c.update, c.list} {
				if !strings.Contains(calls, want) {
					t.Errorf("no call %q in:\n%s", want, calls)
				}
			}
			post := ff.bodies[1]
			head, base := "head", "base"
			if forge == ForgeGitLab {
				head, base = "source_branch", "target_branch"
			}
			if post[head] != "kusaw/r1" || post[base] != "main" || post["title"] != "kusaw run r1" {
				t.Errorf("create body: %v", post)
			}
			// A wrong token: the forge's answer is in the error, the token is not.
			pr.Token = "wrong-secret-value"
			_, _, _, err = openPullRequest(context.Background(), pr)
			if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "wrong-secret-value") {
				t.Fatalf("bad token: %v", err)
			}
		})
	}
}

func TestPullRequestRefusesRedirect(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/elsewhere") && r.Header.Get("Authorization") != "" {
			t.Errorf("the token followed a redirect")
		}
		http.Redirect(w, r, "/elsewhere"+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer srv.Close()
	pr := PullRequest{Forge: ForgeGitHub, APIURL: srv.URL, Repo: "a/b", Base: "main", Head: "x", Token: "t"}
	if _, _, _, err := openPullRequest(context.Background(), pr); err == nil || !strings.Contains(err.Error(), "set api_url") {
		t.Fatalf("redirect: %v", err)
	}
}
