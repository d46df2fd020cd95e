package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sandboxed step commits inside (its objects go to the attempt's private
// object folder) and the next step sees that commit; its attack on a loose
// object of the repository is refused, and the repository stays whole.
func TestSandboxStepCommitsAndLooseObjectsProtected(t *testing.T) {
	need(t, "bwrap")
	need(t, "git")
	// Not under /tmp: the sandbox's /tmp is private, which would keep the
	// repository out of reach whatever kusaw does.
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	app := newRepo(t, dir, "app")
	blob := git(t, app, "rev-parse", "HEAD:README")
	loose := filepath.Join(app, ".git", "objects", blob[:2], blob[2:])
	before, err := os.ReadFile(loose)
	if err != nil {
		t.Fatalf("the fixture has no loose object for README: %v", err)
	}
	// The attack: every way to replace README's loose object; then the
	// legitimate use: a commit made inside.
	writeFile(t, filepath.Join(dir, "scripts", "make.sh"), `set -u
refused() { if "$@" >/dev/null 2>&1; then echo "ESCAPED: $*"; exit 1; fi; }
O=$(git rev-parse HEAD:README) || exit 1
C=$(git rev-parse --git-common-dir) || exit 1
F=$C/objects/$(echo $O | cut -c1-2)/$(echo $O | cut -c3-)
test -f "$F" || { echo "no loose object $F"; exit 1; }
refused rm -f "$F"
refused sh -c "printf evil > $F"
printf evil > "$TMPDIR/evil"
refused mv -f "$TMPDIR/evil" "$F"
refused sh -c "chmod u+w $F; printf evil >> $F"
echo "all refused"
echo inside > inside.txt
git add inside.txt && git commit -q -m "made inside" || exit 1
git log -1 --format=%s
`)
	writeFile(t, filepath.Join(dir, "scripts", "check.sh"), `git log --format=%s | grep -qx "made inside" || { echo "the commit made inside is missing"; exit 1; }
test "$(cat inside.txt)" = inside || exit 1
echo "saw it"
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
	res := runKusaw(t, dir, "run")
	id := ""
	for _, b := range strings.Fields(git(t, app, "for-each-ref", "--format=%(refname:short)", "refs/heads/kusaw/")) {
		if !strings.HasPrefix(b, "kusaw/attempts/") {
			id = strings.TrimPrefix(b, "kusaw/")
		}
	}
	attempt := func(step string) string {
		return filepath.Join(dir, ".kusaw", "runs", id, "steps", step, "1")
	}
	if res.code != 0 {
		out, _ := os.ReadFile(filepath.Join(attempt("make"), "stdout.log"))
		out2, _ := os.ReadFile(filepath.Join(attempt("check"), "stdout.log"))
		t.Fatalf("run failed (exit %d)\n%s%s\nmake: %s\ncheck: %s", res.code, res.stdout, res.stderr, out, out2)
	}
	make := readFile(t, filepath.Join(attempt("make"), "stdout.log"))
	if strings.Contains(make, "ESCAPED") || !strings.Contains(make, "all refused") || !strings.Contains(make, "made inside") {
		t.Fatalf("make step:\n%s", make)
	}
	if check := readFile(t, filepath.Join(attempt("check"), "stdout.log")); !strings.Contains(check, "saw it") {
		t.Fatalf("the next step did not see the commit made inside:\n%s", check)
	}
	// The run branch holds the commit, its objects are in the repository
	// itself, and README's loose object is as it was.
	if s := git(t, app, "log", "--format=%s", "kusaw/"+id); !strings.Contains(s, "made inside") {
		t.Errorf("run branch lacks the commit made inside:\n%s", s)
	}
	if got := git(t, app, "show", "kusaw/"+id+":inside.txt"); got != "inside" {
		t.Errorf("inside.txt on the run branch: %q", got)
	}
	git(t, app, "fsck", "--no-dangling")
	after, err := os.ReadFile(loose)
	if err != nil || string(after) != string(before) {
		t.Errorf("README's loose object changed on the host (%v)", err)
	}
	if got := git(t, app, "show", "main:README"); got != "app" {
		t.Errorf("main:README reads %q", got)
	}
	// The private object folders went with the attempts.
	for _, s := range []string{"make", "check"} {
		if _, err := os.Stat(filepath.Join(attempt(s), "objects")); err == nil {
			t.Errorf("%s: the private object folder was left", s)
		}
	}
	verifyRecords(t, os.Geteuid(), dir)
}
