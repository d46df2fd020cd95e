package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 24, finding 6: the sandbox's stand-ins (empty read-only files it
// mounts over protected files that do not exist yet, such as .mcp.json)
// must not reach the step's view of the repository or a commit. A step
// runs git status --porcelain (it must show only what the step wrote) and
// git add -A && git commit; the run branch gains only the step's file.
// The twin: the file the step legitimately created is committed. As root
// and as uid 65534.
func TestStandInsInvisibleToGit(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			// The repository's own exclude: its lines still apply inside,
			// and it is not changed.
			own := filepath.Join(app, ".git", "info", "exclude")
			writeFile(t, own, "*.log\n")
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
sandbox: {mode: required}
pipelines:
  default: [agentlike]
steps:
  agentlike:
    run: [sh, -c, 'echo new > mine.txt; echo x > debug.log; echo STATUS; git status --porcelain --untracked-files=all; echo END; git add -A && git -c user.name=s -c user.email=s@x commit -qm "step commit" && git show --name-only --format= HEAD']
`)
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run")
			if res.code != 0 {
				t.Fatalf("kusaw run: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			id := onlyRun(t, dir)
			out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "agentlike", "1", "stdout.log"))
			st := out[strings.Index(out, "STATUS\n")+len("STATUS\n") : strings.Index(out, "END\n")]
			if st != "?? mine.txt\n" {
				t.Fatalf("git status inside the sandbox shows more than the step wrote:\n%s\n(all output:\n%s)", st, out)
			}
			files := gitBounded(t, app, "log", "--format=", "--name-status", "HEAD..kusaw/"+id)
			for _, line := range strings.Split(files, "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasSuffix(line, "mine.txt") {
					t.Fatalf("the run branch's history touches %q, which the step did not write:\n%s", line, files)
				}
			}
			if got := gitBounded(t, app, "show", "kusaw/"+id+":mine.txt"); got != "new" {
				t.Fatalf("the step's own file on the run branch: %q", got)
			}
			if got := readFile(t, own); got != "*.log\n" {
				t.Fatalf("the repository's own info/exclude changed: %q", got)
			}
			verifyRecords(t, uid, dir)
		})
	}
}
