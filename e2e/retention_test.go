package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func kusawBranches(t *testing.T, repo string) []string {
	t.Helper()
	return strings.Fields(git(t, repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
}

func listedRuns(t *testing.T, dir string, all bool) []string {
	t.Helper()
	args := []string{"runs", "--json"}
	if all {
		args = append(args, "--all")
	}
	r := runKusaw(t, dir, args...)
	if r.code != 0 {
		t.Fatalf("kusaw runs: %d %s", r.code, r.stderr)
	}
	var runs []struct {
		ID       string `json:"id"`
		Pipeline string `json:"pipeline"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	var ids []string
	for _, x := range runs {
		ids = append(ids, x.ID)
	}
	return ids
}

// kusaw gc removes old runs' records and their kusaw/ branches by count,
// keeps a pinned run, never touches another branch, and refuses bad input
// in one line; kusaw runs leaves sandbox exec's runs out unless --all.
func TestGCAndRunsApart(t *testing.T) {
	need(t, "bwrap")
	dir := factoryDir(t, `version: 1
repos:
  app: {path: app}
pipelines:
  default: [build]
steps:
  build:
    run: [sh, -c, "echo $KUSAW_RUN > out.txt"]
    sandbox: "off"
`, "app")
	repo := filepath.Join(dir, "app")
	git(t, repo, "branch", "feature")
	var ids []string
	for range 3 {
		if r := runKusaw(t, dir, "run"); r.code != 0 {
			t.Fatalf("kusaw run: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	if r := runKusaw(t, dir, "sandbox", "exec", "--", "true"); r.code != 0 {
		t.Fatalf("sandbox exec: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	ids = listedRuns(t, dir, false)
	all := listedRuns(t, dir, true)
	if len(ids) != 3 || len(all) != 4 {
		t.Fatalf("kusaw runs lists %v, --all %v: want 3 and 4", ids, all)
	}
	r := runKusaw(t, dir, "runs")
	if !strings.Contains(r.stdout, "(1 sandbox exec/doctor run not shown: kusaw runs --all)") || strings.Contains(r.stdout, "(sandbox exec)") {
		t.Errorf("kusaw runs:\n%s", r.stdout)
	}
	if r := runKusaw(t, dir, "runs", "--all"); !strings.Contains(r.stdout, "(sandbox exec)") {
		t.Errorf("kusaw runs --all:\n%s", r.stdout)
	}
	newest, middle, oldest := ids[0], ids[1], ids[2]
	var execRun string
	for _, id := range all {
		if !slices.Contains(ids, id) {
			execRun = id
		}
	}
	for _, id := range ids {
		for _, b := range []string{"kusaw/" + id, "kusaw/attempts/" + id + "/build/1"} {
			if !slices.Contains(kusawBranches(t, repo), b) {
				t.Fatalf("run %s has no branch %s: %v", id, b, kusawBranches(t, repo))
			}
		}
	}

	// Bad input: one line, a documented exit code, the values filled in.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"gc"}, 2, "kusaw gc needs a bound: --older-than AGE (such as 30d), --keep N, or retention: {max_age: 30d} in " + filepath.Join(dir, "factory.yaml")},
		{[]string{"gc", "--older-than", "30x"}, 2, `--older-than: "30x" is not an age (write 30d, 2w, 36h or 90m)`},
		{[]string{"gc", "--keep", "0"}, 2, "--keep 0 keeps no run"},
		{[]string{"runs", "pin", "../x"}, 5, `"../x"`},
		{[]string{"runs", "pin", "nope"}, 5, `no such run "nope"`},
	} {
		r := runKusaw(t, dir, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("kusaw %v: exit %d, want %d with %q:\n%s", c.args, r.code, c.code, c.want, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "x")); err == nil {
		t.Error("pin ../x wrote outside runs/")
	}

	if r := runKusaw(t, dir, "runs", "pin", oldest); r.code != 0 || !strings.Contains(r.stdout, "pinned run "+oldest) {
		t.Fatalf("pin: %d %s%s", r.code, r.stdout, r.stderr)
	}
	if r := runKusaw(t, dir, "runs"); !strings.Contains(r.stdout, oldest+"  default   succeeded (pinned)") {
		t.Errorf("kusaw runs does not say the run is pinned:\n%s", r.stdout)
	}
	before := kusawBranches(t, repo)
	r = runKusaw(t, dir, "gc", "--keep", "1", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "would remove "+middle+" (default, succeeded") || !strings.Contains(r.stdout, "beyond the newest 1; branches app:kusaw/") ||
		!strings.Contains(r.stdout, "would remove 1 run and 2 branches") || strings.Contains(r.stdout, "would remove "+newest) {
		t.Fatalf("gc --dry-run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if after := kusawBranches(t, repo); !slices.Equal(before, after) || len(listedRuns(t, dir, true)) != 4 {
		t.Fatalf("a dry run changed something: %v -> %v", before, after)
	}
	r = runKusaw(t, dir, "gc", "--keep", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "removed "+middle) || !strings.Contains(r.stdout, "removed 1 run and 2 branches") {
		t.Fatalf("gc --keep 1: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := listedRuns(t, dir, false); !slices.Equal(got, []string{newest, oldest}) {
		t.Errorf("runs after gc %v, want %v (the newest and the pinned)", got, []string{newest, oldest})
	}
	want := []string{"feature", "kusaw/" + newest, "kusaw/" + oldest, "kusaw/attempts/" + newest + "/build/1", "kusaw/attempts/" + oldest + "/build/1", "main",
		"kusaw/" + execRun, "kusaw/attempts/" + execRun + "/_exec/1"} // one sandbox run is within its bound
	slices.Sort(want)
	if got := kusawBranches(t, repo); !slices.Equal(got, want) {
		t.Errorf("branches after gc %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs", middle)); !os.IsNotExist(err) {
		t.Errorf("the removed run's folder: %v", err)
	}
	if r := runKusaw(t, dir, "logs", middle); r.code != 5 {
		t.Errorf("logs of a removed run: %d %s", r.code, r.stderr)
	}
	// Unpinned, it goes too.
	runKusaw(t, dir, "runs", "unpin", oldest)
	if r := runKusaw(t, dir, "gc", "--keep", "1", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"run": "`+oldest+`"`) {
		t.Errorf("gc after unpin: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// serve applies retention: on its own: at its start and after each run
// ends, with a log line for each run it removed; the API leaves sandbox
// exec's runs out when the web page asks it to.
func TestServeAppliesRetention(t *testing.T) {
	need(t, "bwrap")
	dir := factoryDir(t, `version: 1
repos:
  app: {path: app}
pipelines:
  default: [build]
steps:
  build:
    run: [sh, -c, "echo $KUSAW_RUN > out.txt"]
    sandbox: "off"
retention:
  max_runs: 1
`, "app")
	repo := filepath.Join(dir, "app")
	for range 2 {
		if r := runKusaw(t, dir, "run"); r.code != 0 {
			t.Fatalf("kusaw run: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	if r := runKusaw(t, dir, "sandbox", "exec", "--", "true"); r.code != 0 {
		t.Fatalf("sandbox exec: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	before := listedRuns(t, dir, false)
	sp := startServe(t, dir)
	waitFor(t, "retention at serve's start", 20*time.Second, func() bool {
		return strings.Contains(sp.stderr.String(), "retention removed a run")
	})
	if !strings.Contains(sp.stderr.String(), before[1]) || !strings.Contains(sp.stderr.String(), "beyond the newest 1") {
		t.Errorf("serve's log does not name the run it removed (%s):\n%s", before[1], sp.stderr.String())
	}
	if got := listedRuns(t, dir, false); !slices.Equal(got, before[:1]) {
		t.Fatalf("runs after serve started %v, want %v", got, before[:1])
	}
	// The web page's list: sandbox runs only when asked.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, ".kusaw", "serve", "serve.sock"))
	}}}
	list := func(q string) (n int, hidden int) {
		req, _ := http.NewRequest("GET", "http://serve/v1/runs"+q, nil)
		req.Header.Set("X-Kusaw", "1")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Runs   []json.RawMessage `json:"runs"`
			Hidden int               `json:"sandbox_hidden"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return len(body.Runs), body.Hidden
	}
	if n, h := list("?sandbox=false"); n != 1 || h != 1 {
		t.Errorf("sandbox=false lists %d runs, %d hidden; want 1 and 1", n, h)
	}
	if n, _ := list(""); n != 2 {
		t.Errorf("the API lists %d runs, want 2 (the pipeline's and sandbox exec's)", n)
	}
	if n, _ := list("?sandbox=false&pipeline=" + url.QueryEscape("(sandbox exec)")); n != 1 {
		t.Errorf("a filter naming sandbox exec lists %d runs, want 1", n)
	}

	// A run through serve: when it ends, the one before it goes.
	if r := runKusaw(t, dir, "run"); r.code != 0 {
		t.Fatalf("kusaw run through serve: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var now []string
	waitFor(t, "retention after the run", 20*time.Second, func() bool {
		now = listedRuns(t, dir, false)
		return len(now) == 1 && now[0] != before[0]
	})
	for _, b := range kusawBranches(t, repo) {
		if strings.Contains(b, before[0]) || strings.Contains(b, before[1]) {
			t.Errorf("branch %s of a removed run stays", b)
		}
	}
	sp.stop(t)
}

// A run being run is never removed, even when its record says it ended
// long ago (a record someone rewrote): gc takes the run's lock, which its
// executor holds, and leaves the run and its branches alone.
func TestGCLeavesARunningRun(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: app}
pipelines:
  default: [wait]
steps:
  wait:
    run: [sh, -c, 'while [ ! -e "$0" ]; do sleep 0.1; done', GO_FILE]
    sandbox: "off"
`, "app")
	goFile := filepath.Join(dir, "go")
	writeFile(t, filepath.Join(dir, "factory.yaml"), strings.Replace(readFile(t, filepath.Join(dir, "factory.yaml")), "GO_FILE", goFile, 1))
	repo := filepath.Join(dir, "app")
	run, out, errb := startKusaw(t, dir, "run")
	var id string
	waitFor(t, "the run's attempt", 30*time.Second, func() bool {
		ents, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs", e.Name(), "steps", "wait", "1", "attempt.json")); err == nil {
				id = e.Name()
			}
		}
		return id != ""
	})
	// The record lies: ended 40 days ago.
	p := filepath.Join(dir, ".kusaw", "runs", id, "run.json")
	var rec map[string]any
	if err := json.Unmarshal([]byte(readFile(t, p)), &rec); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-40 * 24 * time.Hour).UTC().Format(time.RFC3339)
	rec["state"], rec["finished"], rec["created"] = "failed", old, old
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runKusaw(t, dir, "gc", "--older-than", "30d")
	if r.code != 0 || !strings.Contains(r.stdout, "kept "+id+" (default): could not remove it: held by another kusaw") || !strings.Contains(r.stdout, "removed 0 runs") {
		t.Errorf("gc of a running run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !slices.Contains(kusawBranches(t, repo), "kusaw/"+id) {
		t.Errorf("the running run's branch is gone: %v", kusawBranches(t, repo))
	}
	writeFile(t, goFile, "")
	if err := run.Wait(); err != nil {
		t.Fatalf("the run did not end well after gc: %v\n%s%s", err, out, errb)
	}
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs", id, "steps", "wait", "1", "stdout.log")); err != nil {
		t.Errorf("the run's records: %v", err)
	}
}

// gc removes a run whose step took write permission away from its own
// folders (artifacts/ stays after the attempt), as root and as a user
// whom the permissions bind.
func TestGCRemovesWhatAStepLocked(t *testing.T) {
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprint("uid", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
pipelines:
  default: [lock]
steps:
  lock:
    run: [sh, -c, 'mkdir -p "$KUSAW_ARTIFACTS/locked/deep" && echo x > "$KUSAW_ARTIFACTS/locked/deep/f" && chmod 0500 "$KUSAW_ARTIFACTS/locked/deep" "$KUSAW_ARTIFACTS/locked"']
    sandbox: "off"
`)
			for range 2 {
				if r := runKusawAs(t, uid, 2*time.Minute, dir, "run"); r.code != 0 {
					t.Fatalf("kusaw run: %d\n%s%s", r.code, r.stdout, r.stderr)
				}
			}
			ents, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
			var ids []string
			for _, e := range ents {
				if e.IsDir() && e.Name() != "active" {
					ids = append(ids, e.Name())
				}
			}
			slices.Sort(ids)
			if len(ids) != 2 {
				t.Fatalf("runs %v", ids)
			}
			r := runKusawAs(t, uid, 2*time.Minute, dir, "gc", "--keep", "1")
			gone, kept := ids[0], ids[1]
			if strings.Contains(r.stdout, "removed "+kept+" ") {
				gone, kept = kept, gone // made in the same second: the record's time decides
			}
			if r.code != 0 || !strings.Contains(r.stdout, "removed "+gone) || !strings.Contains(r.stdout, "removed 1 run and 2 branches") {
				t.Fatalf("gc: %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if _, err := os.Lstat(filepath.Join(dir, ".kusaw", "runs", gone)); !os.IsNotExist(err) {
				t.Errorf("the run's folder stays: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs", kept, "run.json")); err != nil {
				t.Errorf("the newest run: %v", err)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".kusaw", "runs", ".gc-*")); len(left) != 0 {
				t.Errorf("half-removed folders: %v", left)
			}
			if out := gitBounded(t, app, "branch", "--list", "kusaw/*"+gone+"*"); out != "" {
				t.Errorf("branches of the removed run: %s", out)
			}
		})
	}
}

// kusaw gc trims the worktree pools: the idle tree of a repository no
// longer in the factory file, then one idle longer than 7 days; --dry-run
// lists them and changes nothing, --json reports them, and a run's own
// records are not needed for it.
func TestGCTrimsWorktreePools(t *testing.T) {
	yaml := `version: 1
repos:
  app: {path: app}
  lib: {path: lib}
pipelines:
  default: [build]
steps:
  build:
    run: ["true"]
    sandbox: "off"
`
	dir := factoryDir(t, yaml, "app", "lib")
	if r := runKusaw(t, dir, "run"); r.code != 0 {
		t.Fatalf("kusaw run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	slots := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, ".kusaw", "pool", "*", "idle-*"))
		for i := range m {
			m[i] = filepath.Base(filepath.Dir(m[i])) + "/" + filepath.Base(m[i])
		}
		slices.Sort(m)
		return m
	}
	before := slots()
	if len(before) != 2 || !strings.HasPrefix(before[0], "app-") || !strings.HasPrefix(before[1], "lib-") {
		t.Fatalf("pool after a run on two repositories: %v", before)
	}
	writeFile(t, filepath.Join(dir, "factory.yaml"), strings.Replace(yaml, "  lib: {path: lib}\n", "", 1))
	r := runKusaw(t, dir, "gc", "--keep", "10", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "would remove pool tree "+before[1]+" (idle since ") || !strings.Contains(r.stdout, "its repository is not in the factory file") ||
		!strings.Contains(r.stdout, "would remove 1 idle worktree from the pools") || strings.Contains(r.stdout, before[0]) {
		t.Fatalf("gc --dry-run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := slots(); !slices.Equal(got, before) {
		t.Fatalf("a dry run removed pool trees: %v", got)
	}
	r = runKusaw(t, dir, "gc", "--keep", "10")
	if r.code != 0 || !strings.Contains(r.stdout, "removed pool tree "+before[1]) || !strings.Contains(r.stdout, "removed 1 idle worktree from the pools") {
		t.Fatalf("gc: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := slots(); !slices.Equal(got, before[:1]) {
		t.Fatalf("pool after gc: %v, want %v", got, before[:1])
	}
	// A week and an hour without an attempt on app.
	old := time.Now().Add(-7*24*time.Hour - time.Hour)
	if err := os.Chtimes(filepath.Join(dir, ".kusaw", "pool", before[0], "base"), old, old); err != nil {
		t.Fatal(err)
	}
	r = runKusaw(t, dir, "gc", "--keep", "10", "--json")
	var res struct {
		PoolTrees []struct {
			Pool, Tree, Why, Error string
			Idle                   time.Time `json:"idle_since"`
		} `json:"pool_trees"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 {
		t.Fatalf("gc --json: %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if len(res.PoolTrees) != 1 || res.PoolTrees[0].Pool+"/"+res.PoolTrees[0].Tree != before[0] || res.PoolTrees[0].Why != "idle more than 7d" ||
		res.PoolTrees[0].Error != "" || res.PoolTrees[0].Idle.Sub(old).Abs() > time.Second {
		t.Fatalf("gc --json pool_trees: %+v", res.PoolTrees)
	}
	if got := slots(); len(got) != 0 {
		t.Fatalf("pool after gc: %v", got)
	}
	// The next run checks out afresh and fills the pool again.
	if r := runKusaw(t, dir, "run"); r.code != 0 || len(slots()) != 1 {
		t.Fatalf("kusaw run after gc: %d %v\n%s%s", r.code, slots(), r.stdout, r.stderr)
	}
}
