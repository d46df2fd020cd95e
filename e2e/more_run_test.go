package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPipelinePerRepo(t *testing.T) {
	for _, mode := range []string{"off", "required"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "required" {
				needSandbox(t)
			}
			dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
  docs: {path: ./docs}
pipelines:
  default: [each]
steps:
  each:
    per_repo: true
    sandbox: `+mode+`
    run:
      - sh
      - -c
      - |
        me=$(basename "$PWD")
        echo "$me" > mine.txt
        for o in "$KUSAW_WORKTREE_APP" "$KUSAW_WORKTREE_DOCS"; do
          [ "$o" = "$PWD" ] && continue
          if echo x > "$o/cross-$me.txt" 2>/dev/null; then echo "cross-write ok"; else echo "cross-write refused"; fi
        done
`, "app", "docs")
			res := runKusaw(t, dir, "run")
			if res.code != 0 {
				t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			id := onlyRun(t, dir)
			adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "each", "1")
			for _, repo := range []string{"app", "docs"} {
				if got := git(t, filepath.Join(dir, repo), "show", "kusaw/"+id+":mine.txt"); got != repo {
					t.Errorf("%s: mine.txt = %q: its process did not start in its own worktree", repo, got)
				}
				out := readFile(t, filepath.Join(adir, "stdout-"+repo+".log"))
				want := "cross-write ok"
				if mode == "required" {
					// Only that repo's worktree is writable in each sandbox.
					want = "cross-write refused"
				}
				if strings.TrimSpace(out) != want {
					t.Errorf("%s process: %q, want %q", repo, out, want)
				}
			}
			if mode == "required" {
				if n := strings.Count(readFile(t, filepath.Join(adir, "events.jsonl")), `"type":"sandbox.plan"`); n != 2 {
					t.Errorf("%d sandbox.plan events, want one per process", n)
				}
			}
		})
	}
}

func TestPipelineSetupRunsOutsideSandbox(t *testing.T) {
	needSandbox(t)
	// The attempt folder (beside artifacts/) is not writable in the
	// sandbox: setup, outside it, can write there; the step cannot.
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
setup:
  - [sh, -c, 'echo prepared > prepared.txt && touch "$KUSAW_ARTIFACTS/../setup-ran"']
pipelines:
  default: [boxed]
steps:
  boxed:
    sandbox: required
    run: [sh, -c, 'test -f prepared.txt && if touch "$KUSAW_ARTIFACTS/../step-wrote" 2>/dev/null; then echo escaped; else echo confined; fi']
`, "app")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "boxed", "1")
	if out := readFile(t, filepath.Join(adir, "stdout.log")); out != "confined\n" {
		t.Errorf("step: %q", out)
	}
	if _, err := os.Stat(filepath.Join(adir, "setup-ran")); err != nil {
		t.Errorf("setup did not run outside the sandbox: %v", err)
	}
	if !strings.Contains(readFile(t, filepath.Join(adir, "setup.log")), "== app: sh -c") {
		t.Errorf("setup.log lacks the command")
	}
	if got := git(t, filepath.Join(dir, "app"), "show", "kusaw/"+id+":prepared.txt"); got != "prepared" {
		t.Errorf("setup's file: %q", got)
	}
}

func TestPipelineDirtyCheckoutUntouched(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [edit]
steps:
  edit:
    run: [sh, -c, 'cat README > seen.txt && echo step >> README']
`, "app")
	app := filepath.Join(dir, "app")
	writeFile(t, filepath.Join(app, "README"), "uncommitted work\n")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	if got := readFile(t, filepath.Join(app, "README")); got != "uncommitted work\n" {
		t.Errorf("the main checkout's README changed: %q", got)
	}
	if st := git(t, app, "status", "--porcelain", "--untracked-files=no"); st != "M README" {
		t.Errorf("main checkout status %q", st)
	}
	if got := git(t, app, "show", "kusaw/"+id+":seen.txt"); got != "app" {
		t.Errorf("the step saw %q, want the committed README", got)
	}
	if !strings.Contains(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json")), `"uncommitted_in_checkout": [`) {
		t.Error("run.json does not note the uncommitted changes")
	}
}

func TestLogsFollow(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [talk]
steps:
  talk:
    run: [sh, -c, 'echo first; sleep 1.5; echo second >&2']
`, "app")
	run, _, _ := startKusaw(t, dir, "run")
	var id string
	waitFor(t, "the run to start", 20*time.Second, func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
		if len(entries) != 1 {
			return false
		}
		// The folder exists a moment before its record.
		_, err := os.Stat(filepath.Join(dir, ".kusaw", "runs", entries[0].Name(), "run.json"))
		id = entries[0].Name()
		return err == nil
	})
	res := runKusaw(t, dir, "logs", id, "-f")
	if err := run.Wait(); err != nil {
		t.Fatalf("kusaw run: %v", err)
	}
	if res.code != 0 || !strings.Contains(res.stdout, "first") || !strings.Contains(res.stdout, "second") || !strings.Contains(res.stdout, "== talk attempt 1 stderr.log ==") {
		t.Errorf("kusaw logs -f: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if bad := runKusaw(t, dir, "logs", id, "--attempt", "7"); bad.code != 5 {
		t.Errorf("logs of a missing attempt: exit %d", bad.code)
	}
	if bad := runKusaw(t, dir, "logs", "nosuchrun"); bad.code != 5 || !strings.Contains(bad.stderr, "no such run") {
		t.Errorf("logs of a missing run: exit %d %s", bad.code, bad.stderr)
	}
}

func TestPipelineStepListedTwice(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [bump, check, bump]
steps:
  bump:
    run: [sh, -c, 'echo "$KUSAW_ATTEMPT" >> bumps.txt']
  check:
    run: [sh, -c, 'test "$(cat bumps.txt)" = 1']
`, "app")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	if got := git(t, filepath.Join(dir, "app"), "show", "kusaw/"+id+":bumps.txt"); got != "1\n2" {
		t.Errorf("bumps.txt = %q: the second occurrence should be attempt 2 on top of the first", got)
	}
	show := runKusaw(t, dir, "show", id)
	if strings.Count(show.stdout, "attempt 1/1") != 2 || !strings.Contains(show.stdout, "attempt 2/2") {
		t.Errorf("kusaw show:\n%s", show.stdout)
	}
}
