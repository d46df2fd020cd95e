//go:build linux

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Descriptors kusaw inherits (a harness's, a terminal multiplexer's)
// without close-on-exec must not reach the step: Go's os/exec and bwrap
// pass on whatever is open. The attacker's side: kusaw starts with a
// secret file open as descriptors 10 and 251 (where a harness's were seen
// inside the sandbox), and the step lists its descriptors and reads
// those two. Its twins: stdin, stdout and stderr still go through, and
// what kusaw gives bwrap on purpose (the environment through --args, the
// seccomp filter) still arrives.

// fdProbe is the step: its own descriptors between BEGIN and END, then
// whatever it could read from 10 and 251, then bwrap's command line (an
// early start shows --disable-userns --args 3 there).
const fdProbe = `echo BEGIN; ls /proc/$$/fd; echo END; cat /proc/self/fd/10 /proc/self/fd/251 2>/dev/null; echo; echo "bwrap: $(tr '\0' ' ' </proc/1/cmdline)"`

const fdSecret = "inherited-secret-7d1f"

// kusawWithFDs runs the built binary in dir (its home below base,
// testEnv) with stdin and the secret
// open as descriptors 10 and 251 (not close-on-exec: ExtraFiles).
func kusawWithFDs(t *testing.T, base, dir, stdin string, args ...string) result {
	t.Helper()
	f := openSecret(t)
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = testEnv(t, base)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.ExtraFiles = secretAt10And251(f)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("kusaw %v: %v", args, err)
		}
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// openSecret opens a file holding fdSecret, closed after the test.
func openSecret(t *testing.T) *os.File {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	writeFile(t, secret, fdSecret)
	f, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// secretAt10And251 is ExtraFiles with f as descriptors 10 and 251 of the
// child (ExtraFiles[i] is descriptor 3+i; nil ones are closed), not
// close-on-exec there.
func secretAt10And251(f *os.File) []*os.File {
	files := make([]*os.File, 251-3+1)
	files[10-3], files[251-3] = f, f
	return files
}

// checkNoInherited fails when the probe's output shows a descriptor
// beyond 0, 1 and 2, or the secret.
func checkNoInherited(t *testing.T, what, out string) {
	t.Helper()
	i, j := strings.Index(out, "BEGIN\n"), strings.Index(out, "END\n")
	if i < 0 || j < i {
		t.Fatalf("%s: the probe did not run:\n%s", what, out)
	}
	if fds := strings.Fields(out[i+len("BEGIN\n") : j]); strings.Join(fds, " ") != "0 1 2" {
		t.Errorf("%s: the step holds descriptors %v, want exactly 0 1 2\n%s", what, fds, out)
	}
	if strings.Contains(out, fdSecret) {
		t.Errorf("%s: the step read the secret through an inherited descriptor\n%s", what, out)
	}
}

var fdFactory = `version: 1
repos:
  app: {path: app}
pipelines:
  default: [probe]
steps:
  probe:
    run: [sh, -c, '` + strings.ReplaceAll(fdProbe, "'", "''") + `']
    env: {GREETING: hello}
`

// Without a factory file, sandbox exec takes the default policy's path,
// and its second start is the early one (bwrap started as kusaw starts,
// from the first start's shape), which must come after the descriptors
// are marked. With --step it is a one-attempt run of the step.
func TestInheritedFDsStayOutsideSandboxExec(t *testing.T) {
	need(t, "bwrap")
	base := t.TempDir()
	plain := projectDir(t, base)
	for _, start := range []string{"first", "early"} {
		r := kusawWithFDs(t, base, plain, "", "sandbox", "exec", "--", "sh", "-c", fdProbe)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", start, r.code, r.stdout, r.stderr)
		}
		checkNoInherited(t, "sandbox exec, "+start+" start", r.stdout)
		if early := strings.Contains(r.stdout, earlyCmdline); early != (start == "early") {
			t.Errorf("%s start: early start %v, want %v:\n%s", start, early, start == "early", r.stdout)
		}
	}
	dir := factoryDir(t, fdFactory, "app")
	r := kusawWithFDs(t, dir, dir, "", "sandbox", "exec", "--step", "probe", "--", "sh", "-c", fdProbe)
	if r.code != 0 {
		t.Fatalf("--step: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkNoInherited(t, "sandbox exec --step", r.stdout)
}

// projectDir is a folder with no factory file beside the home testEnv
// makes in base (sandbox exec refuses the home and above).
func projectDir(t *testing.T, base string) string {
	dir := filepath.Join(base, "project")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// earlyCmdline is bwrap's command line when it was started early: its
// options come through the pipe at descriptor 3.
const earlyCmdline = "bwrap --disable-userns --args 3 -- "

// The twin: what the step is given on purpose still arrives through the
// same marked kusaw: stdin (the default policy's path passes it on), the
// environment (bwrap's --args file), the filter (bwrap's --seccomp
// descriptor, mode 2), stdout and stderr; early start included.
func TestInheritedFDsTwinStdioAndBwrapsOwn(t *testing.T) {
	need(t, "bwrap")
	const probe = `cat; echo "greeting=$GREETING"; grep Seccomp: /proc/self/status; echo to-stderr >&2; tr '\0' ' ' </proc/1/cmdline`
	check := func(what string, r result, want ...string) {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", what, r.code, r.stdout, r.stderr)
		}
		for _, w := range append(want, "Seccomp:\t2") {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%s: stdout lacks %q:\n%s", what, w, r.stdout)
			}
		}
		if !strings.Contains(r.stderr, "to-stderr") {
			t.Errorf("%s: stderr lacks the step's: %q", what, r.stderr)
		}
	}
	base := t.TempDir()
	plain := projectDir(t, base)
	for _, start := range []string{"first", "early"} {
		r := kusawWithFDs(t, base, plain, "ping from stdin\n", "sandbox", "exec", "--", "sh", "-c", probe)
		want := []string{"ping from stdin"}
		if start == "early" {
			want = append(want, earlyCmdline)
		}
		check("sandbox exec, "+start+" start", r, want...)
	}
	dir := factoryDir(t, fdFactory, "app")
	r := kusawWithFDs(t, dir, dir, "", "sandbox", "exec", "--step", "probe", "--", "sh", "-c", probe)
	check("sandbox exec --step", r, "greeting=hello")
}

// kusaw run: the step's path through the engine (proc, the reaper's
// cgroup hold, bwrap, the stage).
func TestInheritedFDsStayOutsideRunStep(t *testing.T) {
	need(t, "bwrap")
	dir := factoryDir(t, fdFactory, "app")
	r := kusawWithFDs(t, dir, dir, "", "run")
	if r.code != 0 {
		t.Fatalf("kusaw run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	out := readFile(t, filepath.Join(dir, ".kusaw", "runs", onlyRun(t, dir), "steps", "probe", "1", "stdout.log"))
	checkNoInherited(t, "kusaw run", out)
}

// kusaw serve: its attempts run in kusaw-daemon, which kusaw hands over
// to in the same process, so what serve inherited is the daemon's. Both a
// step without a sandbox and a sandboxed one see 0, 1 and 2 only.
func TestInheritedFDsStayOutsideServeSteps(t *testing.T) {
	need(t, "bwrap")
	probe := "'" + strings.ReplaceAll(fdProbe, "'", "''") + "'"
	dir := factoryDir(t, `version: 1
repos:
  app: {path: app}
pipelines:
  default: [open, boxed]
steps:
  open:
    run: [sh, -c, `+probe+`]
  boxed:
    run: [sh, -c, `+probe+`]
    sandbox: {mode: required}
`, "app")
	sp := startServeFiles(t, dir, nil, secretAt10And251(openSecret(t)))
	r := runKusaw(t, dir, "run")
	if r.code != 0 {
		t.Fatalf("kusaw run through serve: exit %d\n%s%s\nserve: %s", r.code, r.stdout, r.stderr, sp.stderr.String())
	}
	run := onlyRun(t, dir)
	for _, step := range []string{"open", "boxed"} {
		out := readFile(t, filepath.Join(dir, ".kusaw", "runs", run, "steps", step, "1", "stdout.log"))
		checkNoInherited(t, "serve's step "+step, out)
	}
}
