package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// kusaw sandbox exec: a step's sandbox on demand, with the command's own
// exit status, its output streamed, and a record like any attempt.
func TestSandboxExecStep(t *testing.T) {
	need(t, "bwrap")
	dir := factoryDir(t, `version: 1
repos:
  app: {path: app}
pipelines:
  default: [build]
steps:
  build:
    run: [true]
    env: {GREETING: hello}
  loose:
    run: [true]
    sandbox: "off"
`, "app")
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "secret.txt"), []byte("x"), 0o600)

	r := runKusaw(t, dir, "sandbox", "exec", "--step", "build", "--",
		"sh", "-c", `echo "$GREETING from $KUSAW_STEP"; pwd; touch "$KUSAW_WORKTREE_APP/new.txt" && echo wrote; touch "$0/escape" 2>/dev/null || echo refused; exit 5`, dir)
	if r.code != 5 {
		t.Fatalf("want the command's exit status 5, got %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"hello from build", "/worktrees/app", "wrote", "refused"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); err == nil {
		t.Fatal("the command wrote outside its worktree")
	}
	id := onlyRun(t, dir)
	rec := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "build", "1", "attempt.json"))
	for _, want := range []string{`"mode": "required"`, `"sandbox_plan"`, `"exit_code": 5`} {
		if !strings.Contains(rec, want) {
			t.Errorf("attempt.json lacks %s", want)
		}
	}
	if out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "build", "1", "stdout.log")); !strings.Contains(out, "hello from build") {
		t.Errorf("stdout.log lacks the output: %q", out)
	}

	// A step whose own mode is off is still sandboxed, and kusaw says so.
	r = runKusaw(t, dir, "sandbox", "exec", "--step", "loose", "--", "sh", "-c", `touch "$0/escape2" 2>/dev/null && echo escaped || echo contained`, dir)
	if r.code != 0 || !strings.Contains(r.stdout, "contained") || !strings.Contains(r.stderr, "ran it sandboxed anyway") {
		t.Fatalf("loose step: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Usage errors: an unknown step, a missing --.
	if r = runKusaw(t, dir, "sandbox", "exec", "--step", "nope", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, `unknown step "nope"`) {
		t.Fatalf("unknown step: %d %s", r.code, r.stderr)
	}
	if r = runKusaw(t, dir, "sandbox", "exec", "true"); r.code != 2 || !strings.Contains(r.stderr, "after --") {
		t.Fatalf("missing --: %d %s", r.code, r.stderr)
	}
}

// Without a factory file: the current folder is writable, nothing else,
// and there is no network.
func TestSandboxExecNoFactory(t *testing.T) {
	need(t, "bwrap")
	dir := t.TempDir()
	outside := t.TempDir()
	// The secret store must not be inside the writable folder: kusaw would
	// refuse to make it writable (a test of its own below).
	run := func(extraEnv []string, args ...string) result {
		cmd := exec.Command(kusawBin, args...)
		cmd.Dir = dir
		cmd.Env = append(testEnv(t, outside), extraEnv...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return result{out.String(), errb.String(), exitCode(err)}
	}
	r := run(nil, "sandbox", "exec", "--", "sh", "-c",
		`echo ok > here.txt && cat here.txt; touch "$0/x" 2>/dev/null && echo escaped; echo routes=$(tail -n +2 /proc/net/route | wc -l); tail -n +3 /proc/net/dev | cut -d: -f1`, outside)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "ok") || strings.Contains(r.stdout, "escaped") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "here.txt")); err != nil {
		t.Fatal("the current folder was not writable")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("wrote outside the current folder")
	}
	// Only loopback: no route out.
	if !strings.Contains(r.stdout, "routes=0") || strings.Contains(r.stdout, "eth") || strings.Contains(r.stdout, "ens") {
		t.Fatalf("a network interface other than lo is visible:\n%s", r.stdout)
	}
	if r = run(nil, "sandbox", "exec", "--", "sh", "-c", "exit 9"); r.code != 9 {
		t.Fatalf("exit status not passed on: %d", r.code)
	}
	// A folder that holds the secret store is never made writable.
	if r = run([]string{"KUSAW_SECRETS_DIR=" + filepath.Join(dir, "secrets")}, "sandbox", "exec", "--", "true"); r.code != 4 || !strings.Contains(r.stderr, "secrets") {
		t.Fatalf("want a refusal naming the secret store: %d %s", r.code, r.stderr)
	}
	// Nor does the home or a folder above it.
	if r = runKusaw(t, dir, "sandbox", "exec", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "home directory or above") {
		t.Fatalf("want a refusal of a folder above the home: %d %s", r.code, r.stderr)
	}
	// A refusal before the command starts is main's to say (cmd/kusaw/early
	// leaves it), once.
	if n := strings.Count(r.stderr, "kusaw: "); n != 1 {
		t.Fatalf("the refusal said %d times:\n%s", n, r.stderr)
	}
}

// A step sees only its own repos: another repo of the factory is hidden
// (attack), while its own worktree reads fine (twin).
func TestSandboxOtherReposHidden(t *testing.T) {
	need(t, "bwrap")
	need(t, "git")
	// Not under /tmp: the sandbox's /tmp is private anyway, which would
	// hide the other repo whatever kusaw does.
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	newRepo(t, dir, "app")
	newRepo(t, dir, "vault")
	writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
  vault: {path: vault}
pipelines:
  default: [build]
steps:
  build:
    run: [true]
    repos: [app]
    sandbox: required
`)
	writeFile(t, filepath.Join(dir, "vault", "token.txt"), "vault-secret-123\n")
	r := runKusaw(t, dir, "sandbox", "exec", "--step", "build", "--", "sh", "-c",
		`cat "$0/vault/token.txt" 2>/dev/null && echo LEAKED; ls "$0/vault" 2>/dev/null | grep -q README && echo LISTED; cat "$KUSAW_WORKTREE_APP/README"`, dir)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "LEAKED") || strings.Contains(r.stdout, "vault-secret-123") || strings.Contains(r.stdout, "LISTED") {
		t.Fatalf("another repo of the factory was readable:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "app") {
		t.Fatalf("the step's own worktree was not readable:\n%s", r.stdout)
	}
}

// A step may write its own branch ref, and so the folder that holds the
// other attempts' branches of its step. Attack: attempt 2 moves attempt 1's
// branch and adds a branch beside it. After the attempt kusaw has put both
// back and recorded it; attempt 1's work is still on its branch.
func TestSandboxSiblingBranchesRestored(t *testing.T) {
	need(t, "bwrap")
	need(t, "git")
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	repo := newRepo(t, dir, "app")
	writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
sandbox: {mode: required}
pipelines:
  default: [work]
steps:
  work:
    attempts: 2
    run: [sh, -c, 'if [ "$KUSAW_ATTEMPT" = 1 ]; then echo one > one.txt; exit 1; fi; d=$(git rev-parse --git-common-dir)/refs/heads/kusaw/attempts/$KUSAW_RUN/$KUSAW_STEP; cp "$d/2" "$d/1" && echo MOVED; cp "$d/2" "$d/99" && echo ADDED; true']
`)
	r := runKusaw(t, dir, "run")
	if r.code != 0 {
		t.Fatalf("kusaw run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := onlyRun(t, dir)
	out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "work", "2", "stdout.log"))
	if !strings.Contains(out, "MOVED") || !strings.Contains(out, "ADDED") {
		t.Fatalf("the attack did not run as intended (the folder must be writable for it to mean anything):\n%s", out)
	}
	branch := "kusaw/attempts/" + id + "/work/1"
	if files := git(t, repo, "ls-tree", "--name-only", branch); !strings.Contains(files, "one.txt") {
		t.Fatalf("attempt 1's branch was left moved: its tree is %q", files)
	}
	if refs := git(t, repo, "for-each-ref", "--format=%(refname)", "refs/heads/kusaw/attempts/"+id+"/work/"); strings.Contains(refs, "/99") {
		t.Fatalf("an added branch was left:\n%s", refs)
	}
	ev := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "work", "2", "events.jsonl"))
	if runtime.GOOS == "linux" {
		// The step wrote its private ref store: the repository's folder
		// was never writable, so there is nothing to repair.
		if !strings.Contains(ev, `"worktree.ref_store"`) || strings.Contains(ev, `"worktree.refs_restored"`) {
			t.Fatal("the step did not get a private ref store")
		}
	} else if !strings.Contains(ev, `"worktree.refs_restored"`) {
		t.Fatal("the repair was not recorded")
	}
}

// Projects under /srv and /var/tmp are ordinary checkouts on servers and
// in containers: sandbox exec runs there (twin), while a system folder
// such as /usr/local stays refused (attack).
func TestSandboxExecServerFolders(t *testing.T) {
	need(t, "bwrap")
	home := t.TempDir()
	for _, root := range []string{"/srv", "/var/tmp"} {
		dir, err := os.MkdirTemp(root, "kusaw-e2e-")
		if err != nil {
			if os.Getenv("CI") == "true" || os.Geteuid() == 0 {
				t.Fatalf("cannot make a project folder under %s: %v", root, err)
			}
			t.Skipf("cannot make a project folder under %s as this user: %v", root, err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		cmd := exec.Command(kusawBin, "sandbox", "exec", "--", "sh", "-c", "echo ok > here.txt && cat here.txt")
		cmd.Dir = dir
		cmd.Env = testEnv(t, home)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok") {
			t.Fatalf("sandbox exec in %s: %v\n%s", dir, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "here.txt")); err != nil {
			t.Fatalf("%s was not writable in the sandbox", dir)
		}
	}
	for _, dir := range []string{"/usr/local", "/srv", "/etc"} {
		cmd := exec.Command(kusawBin, "sandbox", "exec", "--", "true")
		cmd.Dir = dir
		cmd.Env = testEnv(t, home)
		out, err := cmd.CombinedOutput()
		if exitCode(err) != 2 || !strings.Contains(string(out), "system directory") {
			t.Fatalf("sandbox exec in %s: want a refusal naming a system directory, got %d\n%s", dir, exitCode(err), out)
		}
	}
}
