package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runRecord is the part of run.json the tests read.
type runRecord struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Repos  []struct {
		Name, Branch string
		HeadSHA      string `json:"head_sha"`
	} `json:"repos"`
	Steps []struct {
		ID, Outcome string
		Attempts    int
	} `json:"steps"`
}

type attemptRecord struct {
	Step      string `json:"step"`
	Number    int    `json:"attempt"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason"`
	Worktrees []struct {
		Repo, Branch, Path string
		HeadSHA            string `json:"head_sha"`
		Removed            bool
	} `json:"worktrees"`
	Processes []struct {
		PID int `json:"pid"`
	} `json:"processes"`
}

func loadRunRecord(t *testing.T, dir, id string) runRecord {
	t.Helper()
	var r runRecord
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"))), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func loadAttempt(t *testing.T, dir, id, step string, n int) (attemptRecord, bool) {
	t.Helper()
	var a attemptRecord
	b, err := os.ReadFile(filepath.Join(dir, ".kusaw", "runs", id, "steps", step, itoa(n), "attempt.json"))
	if err != nil {
		return a, false
	}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a, true
}

func itoa(n int) string { return strconv.Itoa(n) }

// onlyMainWorktree fails unless git lists just the main checkout.
func onlyMainWorktree(t *testing.T, repo string) {
	t.Helper()
	out := git(t, repo, "worktree", "list")
	if n := len(strings.Split(out, "\n")); n != 1 {
		t.Errorf("git worktree list in %s shows %d worktrees, want only the main one:\n%s", repo, n, out)
	}
}

func TestPipelineThreeStepsTwoRepos(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
  web-docs: {path: ./web-docs}
pipelines:
  default: [first, second, third]
steps:
  first:
    run: [sh, -c, 'echo first > "$KUSAW_WORKTREE_APP/first.txt" && echo first > "$KUSAW_WORKTREE_WEB_DOCS/first.txt" && pwd > "$KUSAW_ARTIFACTS/pwd"']
  second:
    run: [sh, -c, 'test -f first.txt && test -f "$KUSAW_WORKTREE_WEB_DOCS/first.txt" && echo second >> first.txt']
    repos: [app, web-docs]
  third:
    run: [sh, -c, 'grep -q second "$KUSAW_WORKTREE_APP/first.txt" && echo third > third.txt && echo "step=$KUSAW_STEP attempt=$KUSAW_ATTEMPT run=$KUSAW_RUN"']
    repos: [web-docs, app]
`, "app", "web-docs")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	rec := loadRunRecord(t, dir, id)
	if rec.State != "succeeded" || len(rec.Steps) != 3 {
		t.Fatalf("run record: %+v", rec)
	}
	// The run branch holds every step's work, in order.
	app, docs := filepath.Join(dir, "app"), filepath.Join(dir, "web-docs")
	branch := "kusaw/" + id
	if got := git(t, app, "show", branch+":first.txt"); got != "first\nsecond" {
		t.Errorf("app first.txt on the run branch = %q", got)
	}
	if got := git(t, docs, "show", branch+":third.txt"); got != "third" {
		t.Errorf("web-docs third.txt on the run branch = %q", got)
	}
	if git(t, app, "rev-parse", branch) != git(t, app, "rev-parse", "kusaw/attempts/"+id+"/second/1") {
		t.Errorf("app's run branch is not at step second's commit")
	}
	// The third step started in its first repo's worktree and saw the env.
	third, _ := loadAttempt(t, dir, id, "third", 1)
	out := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "third", "1", "stdout.log"))
	if !strings.Contains(out, "step=third attempt=1 run="+id) {
		t.Errorf("third's stdout.log: %q", out)
	}
	pwd := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "first", "1", "artifacts", "pwd"))
	if !strings.HasSuffix(strings.TrimSpace(pwd), filepath.Join("first", "1", "worktrees", "app")) {
		t.Errorf("first started in %q, want its app worktree", pwd)
	}
	for _, w := range third.Worktrees {
		if !w.Removed {
			t.Errorf("worktree %s of third not removed", w.Path)
		}
	}
	// The main checkouts are untouched and carry no leftover worktree.
	for _, r := range []string{app, docs} {
		onlyMainWorktree(t, r)
		if s := git(t, r, "status", "--porcelain", "--untracked-files=no"); s != "" {
			t.Errorf("%s main checkout changed: %s", r, s)
		}
	}
	if _, err := os.Stat(filepath.Join(app, "first.txt")); err == nil {
		t.Errorf("the step wrote into app's main checkout")
	}
	// runs and show report it.
	runs := runKusaw(t, dir, "runs")
	if runs.code != 0 || !strings.Contains(runs.stdout, id) || !strings.Contains(runs.stdout, "succeeded") {
		t.Errorf("kusaw runs: %d %s %s", runs.code, runs.stdout, runs.stderr)
	}
	show := runKusaw(t, dir, "show", id)
	for _, want := range []string{"step first: passed", "step third: passed", "kusaw/attempts/" + id + "/second/1", "attempt 1/1: passed"} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("kusaw show lacks %q:\n%s", want, show.stdout)
		}
	}
	logs := runKusaw(t, dir, "logs", id, "--step", "third")
	if logs.code != 0 || !strings.Contains(logs.stdout, "step=third") || strings.Contains(logs.stdout, "== first") {
		t.Errorf("kusaw logs --step third: %d\n%s%s", logs.code, logs.stdout, logs.stderr)
	}
}

func TestPipelineRetryPassesOnThirdAttempt(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [flaky]
steps:
  flaky:
    attempts: 3
    run: [sh, -c, 'echo "try $KUSAW_ATTEMPT" > try.txt; test "$KUSAW_ATTEMPT" -ge 3']
`, "app")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	app := filepath.Join(dir, "app")
	for n, want := range map[int]string{1: "failed", 2: "failed", 3: "passed"} {
		a, ok := loadAttempt(t, dir, id, "flaky", n)
		if !ok || a.Outcome != want {
			t.Errorf("attempt %d: outcome %q, want %q", n, a.Outcome, want)
		}
		if want == "failed" && a.Reason != "step.exit_nonzero" {
			t.Errorf("attempt %d: reason %q", n, a.Reason)
		}
		// Failed attempts keep their branch, with what they wrote.
		if got := git(t, app, "show", "kusaw/attempts/"+id+"/flaky/"+itoa(n)+":try.txt"); got != "try "+itoa(n) {
			t.Errorf("attempt %d branch try.txt = %q", n, got)
		}
	}
	if got := git(t, app, "show", "kusaw/"+id+":try.txt"); got != "try 3" {
		t.Errorf("run branch try.txt = %q, want the passing attempt's", got)
	}
	if rec := loadRunRecord(t, dir, id); rec.Steps[0].Attempts != 3 {
		t.Errorf("step attempts = %d", rec.Steps[0].Attempts)
	}
	onlyMainWorktree(t, app)
}

func TestPipelineFailsAfterLastAttempt(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [bad, never]
steps:
  bad:
    attempts: 2
    run: [sh, -c, 'echo broken >&2; exit 3']
  never:
    run: ["true"]
`, "app")
	res := runKusaw(t, dir, "run")
	if res.code != 1 {
		t.Fatalf("kusaw run exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "step.exit_nonzero") {
		t.Errorf("stderr lacks the reason: %s", res.stderr)
	}
	id := onlyRun(t, dir)
	rec := loadRunRecord(t, dir, id)
	if rec.State != "failed" || rec.Steps[0].Outcome != "failed" || rec.Steps[1].Outcome != "" {
		t.Errorf("run record: %+v", rec)
	}
	if _, ok := loadAttempt(t, dir, id, "never", 1); ok {
		t.Errorf("a step after a failed step ran")
	}
	if s := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "bad", "2", "stderr.log")); s != "broken\n" {
		t.Errorf("stderr.log = %q", s)
	}
}

func TestPipelineTimeoutKillsGroup(t *testing.T) {
	// The step ignores SIGTERM, so only the SIGKILL after the grace
	// period (KUSAW_KILL_GRACE=2s in tests) ends it.
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [slow]
steps:
  slow:
    timeout: 300ms
    run: [sh, -c, 'trap "" TERM; echo started; while :; do sleep 0.05; done']
`, "app")
	start := time.Now()
	res := runKusaw(t, dir, "run")
	took := time.Since(start)
	if res.code != 1 {
		t.Fatalf("kusaw run exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	a, _ := loadAttempt(t, dir, id, "slow", 1)
	if a.Outcome != "timed_out" || a.Reason != "step.timeout" {
		t.Errorf("attempt: %+v", a)
	}
	if took < 2*time.Second {
		t.Errorf("the run ended after %s: the grace period before SIGKILL was not honoured", took)
	}
	if pid := a.Processes[0].PID; pid == 0 || syscall.Kill(pid, 0) == nil {
		t.Errorf("the step's process %d is still alive", pid)
	}
	onlyMainWorktree(t, filepath.Join(dir, "app"))
}

const slowFactory = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [slow, after]
steps:
  slow:
    run: [sleep, "60"]
  after:
    run: ["true"]
`

// waitProcess waits until the first attempt of step slow has started its
// process, and returns the run id and the pid.
func waitProcess(t *testing.T, dir string) (string, int) {
	t.Helper()
	var id string
	var pid int
	waitFor(t, "the step's process to start", 20*time.Second, func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
		if len(entries) != 1 {
			return false
		}
		id = entries[0].Name()
		a, ok := loadAttempt(t, dir, id, "slow", 1)
		if ok && len(a.Processes) == 1 && a.Processes[0].PID != 0 {
			pid = a.Processes[0].PID
			return true
		}
		return false
	})
	return id, pid
}

func checkCanceled(t *testing.T, dir, id string, pid int) {
	t.Helper()
	rec := loadRunRecord(t, dir, id)
	if rec.State != "canceled" {
		t.Errorf("run state %q, want canceled", rec.State)
	}
	a, _ := loadAttempt(t, dir, id, "slow", 1)
	if a.Outcome != "canceled" {
		t.Errorf("attempt outcome %q, want canceled", a.Outcome)
	}
	if _, ok := loadAttempt(t, dir, id, "after", 1); ok {
		t.Errorf("a step after the canceled one ran")
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("the step's process %d is still alive", pid)
	}
	onlyMainWorktree(t, filepath.Join(dir, "app"))
}

func TestPipelineCancelSIGINT(t *testing.T) {
	dir := factoryDir(t, slowFactory, "app")
	cmd, out, errb := startKusaw(t, dir, "run")
	id, pid := waitProcess(t, dir)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code := exitCode(cmd.Wait())
	if code != 130 {
		t.Fatalf("kusaw run exit %d after SIGINT, want 130\n%s%s", code, out, errb)
	}
	checkCanceled(t, dir, id, pid)
}

func TestPipelineCancelCommand(t *testing.T) {
	dir := factoryDir(t, slowFactory, "app")
	cmd, out, errb := startKusaw(t, dir, "run")
	id, pid := waitProcess(t, dir)
	res := runKusaw(t, dir, "cancel", id)
	if res.code != 0 || !strings.Contains(res.stdout, "canceled") {
		t.Errorf("kusaw cancel: %d %s %s", res.code, res.stdout, res.stderr)
	}
	code := exitCode(cmd.Wait())
	if code != 130 {
		t.Fatalf("kusaw run exit %d after kusaw cancel, want 130\n%s%s", code, out, errb)
	}
	checkCanceled(t, dir, id, pid)
	// A finished run cannot be canceled again.
	if again := runKusaw(t, dir, "cancel", id); again.code == 0 {
		t.Errorf("canceling an ended run succeeded: %s", again.stdout)
	}
}

func TestPipelineKill9IsInterrupted(t *testing.T) {
	dir := factoryDir(t, slowFactory, "app")
	cmd, _, _ := startKusaw(t, dir, "run")
	id, pid := waitProcess(t, dir)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The step dies with its kusaw (parent-death signal).
	waitFor(t, "the step's process to die with kusaw", 5*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
	app := filepath.Join(dir, "app")
	if out := git(t, app, "worktree", "list"); !strings.Contains(out, "kusaw/attempts/") {
		t.Fatalf("expected the killed run's worktree before recovery:\n%s", out)
	}
	res := runKusaw(t, dir, "runs")
	if res.code != 0 || !strings.Contains(res.stdout, "interrupted") {
		t.Fatalf("kusaw runs after kill -9: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	rec := loadRunRecord(t, dir, id)
	if rec.State != "interrupted" || rec.Reason != "run.interrupted" {
		t.Errorf("run record: %+v", rec)
	}
	a, _ := loadAttempt(t, dir, id, "slow", 1)
	if a.Outcome != "interrupted" {
		t.Errorf("attempt outcome %q, want interrupted", a.Outcome)
	}
	onlyMainWorktree(t, app)
	// The records end like any run's: the closing events are appended and
	// every events file ends with a final seal.
	var logs []string
	filepath.Walk(filepath.Join(dir, ".kusaw", "runs", id), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Name() == "events.jsonl" {
			logs = append(logs, p)
		}
		return nil
	})
	if v := runKusaw(t, dir, append([]string{"log", "verify", "--strict"}, logs...)...); v.code != 0 {
		t.Errorf("log verify --strict after recovery: %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	if ev := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "events.jsonl")); !strings.Contains(ev, `"type":"run.finished"`) || !strings.Contains(ev, `"recovered":true`) {
		t.Errorf("the run's events lack the recovered run.finished")
	}
	// Recovery happens once; a second look changes nothing.
	if again := runKusaw(t, dir, "show", id); again.code != 0 || !strings.Contains(again.stdout, "interrupted") {
		t.Errorf("kusaw show: %d %s %s", again.code, again.stdout, again.stderr)
	}
}

func TestPipelineLogsVerify(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [a, b]
steps:
  a:
    attempts: 2
    run: [sh, -c, 'test "$KUSAW_ATTEMPT" = 2']
  b:
    run: [sh, -c, 'echo b > b.txt']
`, "app")
	if res := runKusaw(t, dir, "run"); res.code != 0 {
		t.Fatalf("kusaw run: %d %s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	var files []string
	filepath.Walk(filepath.Join(dir, ".kusaw", "runs", id), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Name() == "events.jsonl" {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 4 { // the run's and three attempts'
		t.Fatalf("events files: %v", files)
	}
	res := runKusaw(t, dir, append([]string{"log", "verify", "--strict"}, files...)...)
	if res.code != 0 {
		t.Fatalf("kusaw log verify on the run's events: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	lines := strings.SplitAfter(readFile(t, files[0]), "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline
	if len(lines) < 4 {
		t.Fatalf("too few lines: %d", len(lines))
	}
	tampered := map[string][]string{
		"edited":    append(append(append([]string{}, lines[:1]...), strings.Replace(lines[1], `"type":"`, `"type":"x`, 1)), lines[2:]...),
		"removed":   append(append([]string{}, lines[:1]...), lines[2:]...),
		"reordered": append([]string{lines[0], lines[2], lines[1]}, lines[3:]...),
	}
	for name, ls := range tampered {
		p := filepath.Join(t.TempDir(), name+".jsonl")
		writeFile(t, p, strings.Join(ls, ""))
		res := runKusaw(t, dir, "log", "verify", p)
		if res.code != 7 || !strings.Contains(res.stdout+res.stderr, "line 2") {
			t.Errorf("%s line: kusaw log verify exit %d, want 7 naming line 2\n%s%s", name, res.code, res.stdout, res.stderr)
		}
	}
}

func TestPipelineSecondSIGINTStopsAtOnce(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [slow]
steps:
  slow:
    run: [sh, -c, 'trap "" TERM INT; : > "$KUSAW_ARTIFACTS/trapped"; while :; do sleep 0.05; done']
`, "app")
	cmd, _, errb := startKusaw(t, dir, "run")
	id, _ := waitProcess(t, dir)
	// The step ignores the signals only once its trap is set: before that
	// (a loaded machine) the first SIGINT's SIGTERM would end it at once.
	trapped := filepath.Join(dir, ".kusaw", "runs", id, "steps", "slow", "1", "artifacts", "trapped")
	waitFor(t, "the step to set its trap", 10*time.Second, func() bool { _, err := os.Stat(trapped); return err == nil })
	cmd.Process.Signal(os.Interrupt)
	waitFor(t, "kusaw to say it is canceling", 10*time.Second, func() bool { return strings.Contains(errb.String(), "canceling the run") })
	start := time.Now()
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("kusaw took %s to stop after the second SIGINT (the grace period is 2s)", took)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Errorf("kusaw did not die of the signal: %v", err)
	}
	res := runKusaw(t, dir, "show", id)
	if !strings.Contains(res.stdout, "interrupted") {
		t.Errorf("after the second SIGINT the run is not interrupted:\n%s", res.stdout)
	}
	onlyMainWorktree(t, filepath.Join(dir, "app"))
}

func TestPipelineJSONStream(t *testing.T) {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [one]
steps:
  one:
    run: ["true"]
`, "app")
	res := runKusaw(t, dir, "run", "--json")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		var ev struct {
			Seq  int64  `json:"seq"`
			Run  string `json:"run"`
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Seq == 0 || ev.Run == "" {
			t.Fatalf("not an event line: %q (%v)", line, err)
		}
		types = append(types, ev.Type)
	}
	want := []string{"run.started", "step.started", "attempt.started", "worktree.created", "process.started", "process.exited", "worktree.committed", "attempt.finished", "step.finished", "run.finished"}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Errorf("events:\n%v\nwant\n%v", types, want)
	}
}
