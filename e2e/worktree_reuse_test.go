package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Worktree reuse (docs/factory.md, "Worktree reuse"): an attempt takes the
// tree an earlier attempt on the repository left, cleaned. A reused tree is
// hostile input: everything a sandboxed step left in it, of every kind,
// must be gone at the next attempt, whose tree equals a fresh checkout of
// its base file by file (type, mode, link target, content). Run as root and
// as a normal user.

// reuseAttack runs inside the sandbox in its worktree, and says what it
// managed to do: an attack that could not be made proves nothing.
const reuseAttack = `set -u
did() { echo "did: $1"; }
echo planted > src/planted.go && did untracked
echo left > debug.log && did ignored
mkdir -p junk/x && echo y > junk/x/y && chmod 0 junk/x && did unreadable-folder
rm -rf src/deep && ln -s /etc src/deep && did link-for-folder
mkfifo pipe && did fifo
rm -f notes.txt && mkfifo notes.txt && did fifo-for-file
chmod 777 README && chmod 644 bin/run.sh && did file-modes
chmod 4755 bin/tool && did setuid
chmod 777 docs && chmod 1777 src && did folder-modes
ln -f README docs/hard.md && did hard-link
m=$(stat -c %Y src/a.go) && printf 'package b\n' > src/a.go && touch -d @$m src/a.go && did forged-mtime
git update-index --refresh >/dev/null 2>&1; did forged-index
G=$(git rev-parse --git-dir) && echo planted > "$G/planted" && did git-folder-file
# The sandbox keeps .git itself read-only; a step without one could.
{ rm -f .git && echo "gitdir: /tmp/elsewhere" > .git; } 2>/dev/null && did git-file-elsewhere
exit 1
`

// reuseLook writes what its worktree holds, file by file. It runs
// unsandboxed: it must see the tree kusaw hands over, not the read-only
// stand-ins a sandbox adds to its view (.mcp.json, .claude/ and the like).
const reuseLook = `out=${1:-$KUSAW_ARTIFACTS/manifest}
find . -path ./.git -prune -o -printf '%y %m %P -> %l\n' | LC_ALL=C sort > "$out"
find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum >> "$out"
echo looked
`

// reuseChange: the legitimate twin's edits (adds, deletes, renames,
// chmods).
const reuseChange = `set -eu
mkdir -p new && echo added > new/file.txt
rm notes.txt
mv src/deep/c.go src/moved.go
chmod 755 README
chmod 644 bin/run.sh
printf 'package c\n' > src/a.go
echo changed
`

func reuseRepo(t *testing.T, dir string) string {
	t.Helper()
	app := newRepo(t, dir, "app")
	writeFile(t, filepath.Join(app, ".gitignore"), "*.log\n")
	writeFile(t, filepath.Join(app, "src", "a.go"), "package a\n")
	writeFile(t, filepath.Join(app, "src", "deep", "b.go"), "package deep\n")
	writeFile(t, filepath.Join(app, "bin", "run.sh"), "#!/bin/sh\necho run\n")
	writeFile(t, filepath.Join(app, "bin", "tool"), "#!/bin/sh\n")
	writeFile(t, filepath.Join(app, "docs", "guide.md"), "guide\n")
	writeFile(t, filepath.Join(app, "notes.txt"), "notes\n")
	os.Chmod(filepath.Join(app, "bin", "run.sh"), 0o755)
	os.Chmod(filepath.Join(app, "bin", "tool"), 0o755)
	os.Symlink("src/a.go", filepath.Join(app, "link"))
	git(t, app, "add", "-A")
	git(t, app, "commit", "-q", "-m", "tree")
	return app
}

// freshLook runs reuseLook on a plain git worktree add of commit.
func freshLook(t *testing.T, app, commit, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fresh")
	gitBounded(t, app, "worktree", "add", "-q", "--detach", p, commit)
	defer gitBounded(t, app, "worktree", "remove", "--force", p)
	out := filepath.Join(t.TempDir(), "manifest")
	cmd := exec.Command("sh", script, out)
	cmd.Dir = p
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("look at a fresh checkout: %v\n%s", err, b)
	}
	return readFile(t, out)
}

// createdEvent is the attempt's worktree.created event's data.
func createdEvent(t *testing.T, adir string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(readFile(t, filepath.Join(adir, "events.jsonl")), "\n") {
		var ev struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "worktree.created" {
			return ev.Data
		}
	}
	t.Fatalf("no worktree.created event in %s", adir)
	return nil
}

func TestWorktreeReuseHostileLeftovers(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	// The same with the write layer (docs/factory.md, "The write layer"):
	// the attack writes through an overlay, its release reverts what the
	// layer holds, and the next take skips the cleaning walk.
	for _, layer := range []string{"none", "overlay"} {
		for _, uid := range seamUIDs() {
			testReuseHostileLeftovers(t, layer, uid)
		}
	}
}

func testReuseHostileLeftovers(t *testing.T, layer string, uid int) {
	{
		t.Run(fmt.Sprintf("write_layer=%s/uid%d", layer, uid), func(t *testing.T) {
			dir, err := os.MkdirTemp("/var/tmp", "kusaw-reuse-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			os.Chmod(dir, 0o755)
			app := reuseRepo(t, dir)
			scripts := filepath.Join(dir, "scripts")
			writeFile(t, filepath.Join(scripts, "attack.sh"), reuseAttack)
			writeFile(t, filepath.Join(scripts, "look.sh"), reuseLook)
			writeFile(t, filepath.Join(scripts, "change.sh"), reuseChange)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app, write_layer: `+layer+`}
pipelines:
  attack: [attack]
  look: [look]
  change: [change]
steps:
  attack:
    run: [sh, `+filepath.Join(scripts, "attack.sh")+`]
    sandbox: required
  look:
    run: [sh, `+filepath.Join(scripts, "look.sh")+`]
    sandbox: off
  change:
    run: [sh, `+filepath.Join(scripts, "change.sh")+`]
    sandbox: required
`)
			attempt := func(res result, step string) string {
				t.Helper()
				return filepath.Join(dir, ".kusaw", "runs", runIDOf(t, res), "steps", step, "1")
			}
			// 1. The attack: it fails, so its files stay out of main.
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run", "attack")
			adir := attempt(res, "attack")
			attackDir := adir
			out := readFile(t, filepath.Join(adir, "stdout.log"))
			for _, what := range []string{"untracked", "ignored", "unreadable-folder", "link-for-folder", "fifo", "fifo-for-file", "file-modes", "setuid", "folder-modes", "hard-link", "forged-mtime", "git-folder-file"} {
				if !strings.Contains(out, "did: "+what+"\n") {
					errs, _ := os.ReadFile(filepath.Join(adir, "stderr.log"))
					t.Errorf("the attack %s could not be made:\n%s%s", what, out, errs)
				}
			}
			// 2. main moves on (a change, a new file, a deletion), so the
			// next attempt checks a new base out over the tree.
			writeFile(t, filepath.Join(app, "docs", "guide.md"), "guide, second edition\n")
			writeFile(t, filepath.Join(app, "docs", "more.md"), "more\n")
			os.Remove(filepath.Join(app, "src", "deep", "b.go"))
			writeFile(t, filepath.Join(app, "src", "deep", "c.go"), "package deep\n")
			gitBounded(t, app, "add", "-A")
			gitBounded(t, app, "commit", "-q", "-m", "second")
			base := gitBounded(t, app, "rev-parse", "main")
			res = runKusawAs(t, uid, 2*time.Minute, dir, "run", "look")
			adir = attempt(res, "look")
			if res.code != 0 {
				t.Fatalf("look failed (exit %d)\n%s%s", res.code, res.stdout, res.stderr)
			}
			ev := createdEvent(t, adir)
			if ev["reused"] != true {
				t.Errorf("the second attempt did not reuse the tree: %v", ev)
			}
			if (ev["walk_skipped"] == true) != (layer == "overlay") {
				evs, _ := os.ReadFile(filepath.Join(attackDir, "events.jsonl"))
				t.Errorf("write_layer %s: the take after the attack skipped the cleaning walk: %v\n%s", layer, ev["walk_skipped"], evs)
			}
			if ev["base"] != base {
				t.Errorf("base %v, want %s", ev["base"], base)
			}
			got := readFile(t, filepath.Join(adir, "artifacts", "manifest"))
			if want := freshLook(t, app, base, filepath.Join(scripts, "look.sh")); got != want {
				t.Errorf("the reused tree is not a fresh checkout of %s:\n%s\nwant:\n%s", base, got, want)
			}
			if _, err := os.Lstat("/tmp/elsewhere"); err == nil {
				t.Errorf("kusaw followed the step's .git to /tmp/elsewhere")
			}
			// 3. The twin: on a reused tree, a step's adds, deletes,
			// renames and chmods are committed exactly.
			res = runKusawAs(t, uid, 2*time.Minute, dir, "run", "change")
			adir = attempt(res, "change")
			if res.code != 0 {
				t.Fatalf("change failed (exit %d)\n%s%s", res.code, res.stdout, res.stderr)
			}
			if ev := createdEvent(t, adir); ev["reused"] != true {
				t.Errorf("the twin did not reuse the tree: %v", ev)
			}
			ref := filepath.Join(t.TempDir(), "ref")
			gitBounded(t, app, "worktree", "add", "-q", "--detach", ref, base)
			defer gitBounded(t, app, "worktree", "remove", "--force", ref)
			cmd := exec.Command("sh", filepath.Join(scripts, "change.sh"))
			cmd.Dir = ref
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			gitBounded(t, ref, "add", "-A")
			want := gitBounded(t, ref, "write-tree")
			run := "kusaw/" + runIDOf(t, res)
			if got := gitBounded(t, app, "rev-parse", run+"^{tree}"); got != want {
				t.Errorf("the twin committed tree %s, want %s:\n%s", got, want, gitBounded(t, app, "diff", "--stat", "main", run))
			}
			verifyRecords(t, uid, dir)
		})
	}
}
