package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorktreeSetup: a sandboxed step gets the repo's gitignored .env in its
// worktree (never committed, even when the step un-ignores it), a go cache
// that the next run sees, and two leased ports; a secret in a home
// dot-folder is never included, whatever the glob.
func TestWorktreeSetup(t *testing.T) {
	needSandbox(t)
	dir := factoryDir(t, `version: 1
repos:
  app:
    path: ./app
    include: [.env, "config/*.local.yaml", missing.txt]
caches: [go]
sandbox: {mode: required}
pipelines:
  default: [work]
steps:
  work:
    ports: 2
    run: [sh, -c, 'set -e; cat .env; cat config/db.local.yaml; echo "cache=$GOMODCACHE"; echo "build=$GOCACHE"; echo "ports=$KUSAW_PORT_1,$KUSAW_PORT_2"; n=$(cat "$GOMODCACHE/count" 2>/dev/null || echo 0); echo $((n+1)) > "$GOMODCACHE/count"; : > .gitignore; echo work > work.txt']
`, "app")
	app := filepath.Join(dir, "app")
	writeFile(t, filepath.Join(app, ".gitignore"), ".env\nconfig/*.local.yaml\n")
	git(t, app, "add", ".gitignore")
	git(t, app, "commit", "-qm", "ignore")
	writeFile(t, filepath.Join(app, ".env"), "TOKEN=from-the-checkout\n")
	writeFile(t, filepath.Join(app, "config", "db.local.yaml"), "db: local\n")

	for run := 1; run <= 2; run++ {
		res := runKusaw(t, dir, "run")
		if res.code != 0 {
			t.Fatalf("run %d: exit %d\n%s\n%s", run, res.code, res.stdout, res.stderr)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
	var last string
	for _, e := range entries {
		if e.Name() > last && e.Name() != "active" {
			last = e.Name()
		}
	}
	out := readFile(t, filepath.Join(dir, ".kusaw", "runs", last, "steps", "work", "1", "stdout.log"))
	if !strings.Contains(out, "TOKEN=from-the-checkout") || !strings.Contains(out, "db: local") {
		t.Fatalf("the included files were not in the worktree:\n%s", out)
	}
	cache := filepath.Join(dir, ".kusaw", "caches", "go", "mod")
	if !strings.Contains(out, "cache="+cache) || !strings.Contains(out, "build="+filepath.Join(dir, ".kusaw", "caches", "go", "build")) {
		t.Fatalf("GOMODCACHE and GOCACHE are not in the factory's go cache:\n%s", out)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(cache, "count"))); got != "2" {
		t.Fatalf("the cache was not shared by the two runs: count %q", got)
	}
	var p1, p2 string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "ports="); ok {
			p1, p2, _ = strings.Cut(v, ",")
		}
	}
	if p1 == "" || p2 == "" || p1 == p2 {
		t.Fatalf("leased ports %q and %q", p1, p2)
	}
	// The step emptied .gitignore, yet the included files are not committed.
	files := git(t, app, "ls-tree", "-r", "--name-only", "kusaw/"+last)
	if strings.Contains(files, ".env") || strings.Contains(files, "db.local.yaml") || !strings.Contains(files, "work.txt") {
		t.Fatalf("run branch files:\n%s", files)
	}
	events := readFile(t, filepath.Join(dir, ".kusaw", "runs", last, "steps", "work", "1", "events.jsonl"))
	if !strings.Contains(events, `"type":"worktree.included"`) || !strings.Contains(events, `"type":"ports.leased"`) {
		t.Fatalf("events lack the set-up:\n%s", events)
	}
}
