package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Pipeline shapes end to end: the built binary, real git and real bwrap
// (every step sandboxed), no network. Each scenario is small: a few
// command steps of a shell line each.

// shapeFactory writes a factory with one repo app whose steps all run
// sandboxed, and returns its folder.
func shapeFactory(t *testing.T, pipelines, steps string) string {
	t.Helper()
	needSandbox(t)
	return factoryDir(t, "version: 1\nrepos:\n  app: {path: ./app}\nsandbox: {mode: required}\npipelines:\n"+pipelines+"steps:\n"+steps, "app")
}

// runDetail is run.json's message and step lines as the shape tests read them.
type runDetail struct {
	State   string `json:"state"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Steps   []struct {
		ID         string `json:"id"`
		Outcome    string `json:"outcome"`
		Attempts   int    `json:"attempts"`
		First      int    `json:"first_attempt"`
		Group      int    `json:"group"`
		Candidates int    `json:"candidates"`
		Chosen     int    `json:"chosen"`
	} `json:"steps"`
}

func loadDetail(t *testing.T, dir, id string) runDetail {
	t.Helper()
	var d runDetail
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"))), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// onBranch is a file's content on the run branch ("" when it is not there).
func onBranch(dir, id, file string) string {
	out, err := gitOut(filepath.Join(dir, "app"), "show", "kusaw/"+id+":"+file)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func gitOut(dir string, args ...string) (string, error) {
	cmd := gitCmd(dir, args...)
	b, err := cmd.Output()
	return string(b), err
}

// attemptTimes reads an attempt's start and end.
func attemptTimes(t *testing.T, dir, id, step string, n int) (time.Time, time.Time) {
	t.Helper()
	var a struct {
		Started  time.Time `json:"started"`
		Finished time.Time `json:"finished"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", step, itoa(n), "attempt.json"))), &a); err != nil {
		t.Fatal(err)
	}
	return a.Started, a.Finished
}

func TestShapeGroupOverlapsAndMerges(t *testing.T) {
	dir := shapeFactory(t, "  default: [[left, right], after]\n", `  left: {run: [sh, -c, "echo left > left.txt; sleep 1"]}
  right: {run: [sh, -c, "echo right > right.txt; sleep 1"]}
  after: {run: [sh, -c, "test -f left.txt && test -f right.txt"]}
`)
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	ls, lf := attemptTimes(t, dir, id, "left", 1)
	rs, rf := attemptTimes(t, dir, id, "right", 1)
	if !ls.Before(rf) || !rs.Before(lf) {
		t.Fatalf("the group's members did not overlap: left %s..%s, right %s..%s", ls, lf, rs, rf)
	}
	if onBranch(dir, id, "left.txt") != "left" || onBranch(dir, id, "right.txt") != "right" {
		t.Fatal("a member's work is not on the run branch")
	}
	d := loadDetail(t, dir, id)
	if d.Steps[0].Group != 1 || d.Steps[1].Group != 1 || d.Steps[2].Group != 0 {
		t.Fatalf("group numbers: %+v", d.Steps)
	}
	if show := runKusaw(t, dir, "show", id); !strings.Contains(show.stdout, "parallel group 1: left passed (1 attempt(s)) │ right passed (1 attempt(s))") {
		t.Fatalf("kusaw show does not draw the group side by side:\n%s", show.stdout)
	}
	onlyMainWorktree(t, filepath.Join(dir, "app"))
}

func TestShapeGroupConflictAndResolve(t *testing.T) {
	steps := `  one: {run: [sh, -c, "echo one > README"]RESOLVE}
  two: {run: [sh, -c, "echo two > README"]}
  fix: {run: [sh, -c, "grep -q '<<<<<<<' README && echo both > README"]}
`
	dir := shapeFactory(t, "  default: [[one, two]]\n", strings.Replace(steps, "RESOLVE", "", 1))
	res := runKusaw(t, dir, "run")
	if res.code == 0 {
		t.Fatalf("a conflicting group passed\n%s%s", res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	d := loadDetail(t, dir, id)
	if d.Reason != "merge_conflict" || !strings.Contains(d.Message, "README") {
		t.Fatalf("run: %s %s %s", d.State, d.Reason, d.Message)
	}
	for _, b := range []string{"kusaw/attempts/" + id + "/one/1", "kusaw/attempts/" + id + "/two/1"} {
		if _, err := gitOut(filepath.Join(dir, "app"), "rev-parse", "--verify", b); err != nil {
			t.Errorf("member branch %s was not kept", b)
		}
	}
	if !strings.Contains(res.stdout+res.stderr, "README") {
		t.Errorf("kusaw run does not name the conflicted file:\n%s%s", res.stdout, res.stderr)
	}

	dir = shapeFactory(t, "  default: [[one, two]]\n", strings.Replace(steps, "RESOLVE", ", resolve: fix", 1))
	res = runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("with resolve: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id = onlyRun(t, dir)
	if got := onBranch(dir, id, "README"); got != "both" {
		t.Fatalf("README after resolve: %q", got)
	}
	onlyMainWorktree(t, filepath.Join(dir, "app"))
}

func TestShapeCandidatesAndJudge(t *testing.T) {
	dir := shapeFactory(t, "  default: [try]\n", `  try:
    candidates: 3
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt; test $KUSAW_CANDIDATE = 2"]
`)
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	if got := onBranch(dir, id, "pick.txt"); got != "2" {
		t.Fatalf("the run branch holds candidate %q's work, want 2's", got)
	}
	if d := loadDetail(t, dir, id); d.Steps[0].Candidates != 3 || d.Steps[0].Chosen != 2 {
		t.Fatalf("step line: %+v", d.Steps[0])
	}
	show := runKusaw(t, dir, "show", id)
	if !strings.Contains(show.stdout, "3 candidates side by side, kept: candidate 2") || !strings.Contains(show.stdout, "candidate 2, attempt 2/3: passed") ||
		!strings.Contains(show.stdout, "← kept") || !strings.Contains(show.stdout, "candidate 1, attempt 1/3: failed") {
		t.Fatalf("kusaw show does not list the candidates:\n%s", show.stdout)
	}

	// The judge reads every passing candidate's files, cannot change them,
	// and its choice is what lands.
	dir = shapeFactory(t, "  default: [try]\n", `  try:
    candidates: 3
    select: judge:pick
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt"]
  pick:
    run: [sh, -c, 'test "$(cat $KUSAW_CANDIDATE_3/pick.txt)" = 3 || exit 9; if echo x > $KUSAW_CANDIDATE_1/pick.txt 2>/dev/null; then echo WROTE; else echo refused; fi; echo 3 > $KUSAW_ARTIFACTS/choice']
`)
	res = runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("judge run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id = onlyRun(t, dir)
	if got := onBranch(dir, id, "pick.txt"); got != "3" {
		t.Fatalf("the judge chose 3, the run branch holds %q", got)
	}
	if out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "pick", "1", "stdout.log")); out != "refused\n" {
		t.Fatalf("the judge could write a candidate's files: %q", out)
	}
}

func TestShapeFixLoopAndRetryRules(t *testing.T) {
	dir := shapeFactory(t, "  default: [check]\n", `  check:
    attempts: 2
    on_failure: fixer
    run: [sh, -c, "test -f fixed.txt || { echo missing fixed.txt; exit 1; }"]
  fixer:
    run: [sh, -c, 'test "$KUSAW_PREVIOUS_EXIT_CODE" = 1 && grep -q missing "$KUSAW_PREVIOUS_DIR/stdout.log.tail" && echo yes > fixed.txt']
`)
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("fix loop: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	if d := loadDetail(t, dir, id); d.Steps[0].Attempts != 2 || d.Steps[0].Outcome != "passed" {
		t.Fatalf("check: %+v", d.Steps[0])
	}
	if onBranch(dir, id, "fixed.txt") != "yes" {
		t.Fatal("the fixer's commit did not reach the run branch through attempt 2")
	}

	// exit 3 is retried, exit 4 ends the step at once (attempts left over).
	dir = shapeFactory(t, "  default: [flaky]\n", `  flaky:
    retry: {attempts: 5, on: ["exit:3"]}
    run: [sh, -c, 'test "$KUSAW_ATTEMPT" -ge 3 && exit 4; exit 3']
`)
	res = runKusaw(t, dir, "run")
	if res.code == 0 {
		t.Fatal("the run passed")
	}
	id = onlyRun(t, dir)
	if d := loadDetail(t, dir, id); d.Steps[0].Attempts != 3 {
		t.Fatalf("want 3 attempts (exit 3, exit 3, exit 4), got %+v", d.Steps[0])
	}
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs", id, "steps", "flaky", "4")); err == nil {
		t.Fatal("a fourth attempt ran after exit 4")
	}
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	return cmd
}

// TestShapeFixerAgentGetsTheFailure: an agent fixer's prompt carries a
// note of why the attempt before it failed, and its environment the
// KUSAW_PREVIOUS_* variables; its edit makes the next attempt pass.
func TestShapeFixerAgentGetsTheFailure(t *testing.T) {
	f := buildFakes(t)
	dir := agentFactory(t, f.Claude, `pipelines:
  default: [check]
steps:
  check:
    repos: [app]
    attempts: 2
    on_failure: fix
    run: [sh, -c, "test -f fixed.txt || { echo fixed.txt is missing; exit 7; }"]
  fix:
    repos: [app]
    prompt: Make the check pass.
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: fixed.txt
      FAKE_AGENT_CONTENT: fixed
`)
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	var rec struct {
		Processes []struct {
			Argv []string          `json:"argv"`
			Env  map[string]string `json:"env"`
		} `json:"processes"`
	}
	json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "fix", "1", "attempt.json"))), &rec)
	if len(rec.Processes) != 1 {
		t.Fatalf("fixer record: %+v", rec)
	}
	argv := strings.Join(rec.Processes[0].Argv, " ")
	if !strings.Contains(argv, "Make the check pass.") || !strings.Contains(argv, "(kusaw: attempt 1 of step check ended failed (step.exit_nonzero) exit 7") {
		t.Fatalf("the fixer's prompt lacks the failure note: %s", argv)
	}
	env := rec.Processes[0].Env
	if env["KUSAW_PREVIOUS_EXIT_CODE"] != "7" || env["KUSAW_PREVIOUS_STEP"] != "check" || !strings.Contains(env["KUSAW_PREVIOUS_OUTPUT"], "fixed.txt is missing") {
		t.Fatalf("the fixer's KUSAW_PREVIOUS_*: %v", env)
	}
	if onBranch(dir, id, "fixed.txt") != "fixed" {
		t.Fatal("the fixer's edit did not reach the run branch through attempt 2")
	}
}
