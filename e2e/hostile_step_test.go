package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What a sandboxed step leaves for kusaw to read on the host is hostile:
// these attacks come from inside the sandbox (real bwrap, real git).

// runKusawWithin is runKusaw that fails the test, instead of hanging it,
// when kusaw does not end within d (a hang is the attack's success).
func runKusawWithin(t *testing.T, d time.Duration, dir string, args ...string) result {
	t.Helper()
	cmd, out, errb := startKusaw(t, dir, args...)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return result{out.String(), errb.String(), exitCode(err)}
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("kusaw %v did not end within %s: it hangs on what the step left\n%s%s", args, d, out.String(), errb.String())
	}
	return result{}
}

// A judge's choice is read by kusaw outside the sandbox. A link there to a
// host file the judge cannot read must not be followed (its first bytes
// would land in the run's message), and a FIFO must not hang the run.
func TestJudgeChoiceIsNotFollowedOrBlocking(t *testing.T) {
	pipelines := "  default: [try]\n"
	try := `  try:
    candidates: 2
    select: judge:pick
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt"]
`
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("hunter2-host-only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, judge, want string }{
		{"link", `ln -s ` + secret + ` $KUSAW_ARTIFACTS/choice`, "is a link"},
		{"fifo", `mkfifo $KUSAW_ARTIFACTS/choice`, "is a FIFO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shapeFactory(t, pipelines, try+"  pick:\n    run: [sh, -c, '"+tc.judge+"']\n")
			res := runKusawWithin(t, 90*time.Second, dir, "run")
			if res.code == 0 {
				t.Fatalf("the run passed on a judge's %s choice\n%s%s", tc.name, res.stdout, res.stderr)
			}
			id := onlyRun(t, dir)
			runJSON := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"))
			events := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "events.jsonl"))
			for _, s := range []string{runJSON, events, res.stdout, res.stderr} {
				if strings.Contains(s, "hunter2") {
					t.Fatalf("the host file behind the judge's link reached the run's records or output:\n%s", s)
				}
			}
			if !strings.Contains(runJSON, tc.want) {
				t.Fatalf("run.json does not say why the choice was refused (%q):\n%s", tc.want, runJSON)
			}
			verifyRecords(t, os.Geteuid(), dir)
		})
	}
}
