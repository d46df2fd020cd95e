package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// serveProc is a running `kusaw serve`.
type serveProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	dir    string
	client *client.Client
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe starts kusaw serve in dir and waits until its socket answers.
func startServe(t testing.TB, dir string, args ...string) *serveProc {
	t.Helper()
	return startServeEnv(t, dir, nil, args...)
}

func startServeEnv(t testing.TB, dir string, env []string, args ...string) *serveProc {
	t.Helper()
	return startServeFiles(t, dir, env, nil, args...)
}

// startServeFiles is startServeEnv with files serve inherits as
// descriptors 3 and up (exec.Cmd.ExtraFiles).
func startServeFiles(t testing.TB, dir string, env []string, files []*os.File, args ...string) *serveProc {
	t.Helper()
	// A short stop grace keeps the tests' shutdowns quick.
	cmd := exec.Command(kusawBin, append([]string{"serve", "--grace=2s"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(testEnv(nil, dir), env...) // testEnv does not use its t
	cmd.ExtraFiles = files
	sp := &serveProc{cmd: cmd, stderr: &syncBuffer{}, dir: dir}
	cmd.Stderr = sp.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := client.DialServe(filepath.Join(dir, ".kusaw"))
		if err == nil {
			sp.client = c
			return sp
		}
		if time.Now().After(deadline) {
			t.Fatalf("kusaw serve did not come up: %v\n%s", err, sp.stderr.String())
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for serve to exit.
func (sp *serveProc) stop(t *testing.T) {
	t.Helper()
	_ = sp.cmd.Process.Signal(syscall.SIGTERM)
	if err := sp.cmd.Wait(); err != nil {
		t.Fatalf("kusaw serve after SIGTERM: %v\n%s", err, sp.stderr.String())
	}
}

func waitDetail(t *testing.T, c *client.Client, id string, d time.Duration) *client.RunDetail {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		det, err := c.Detail(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if det.Run.State.Final() {
			return det
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %s", id, det.Run.State, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const serveFactoryYAML = `version: 1
repos:
  app:
    path: app
serve:
  max_parallel: 3
pipelines:
  default: [build, check]
  slow: [wait]
steps:
  build:
    run: [sh, -c, "echo built > out.txt; sleep 0.2"]
  check:
    run: [sh, -c, "test -s out.txt && echo checked"]
  wait:
    run: [sh, -c, "echo waiting; sleep 60"]
`

func TestServeTwentyRunsAtOnce(t *testing.T) {
	dir := factoryDir(t, serveFactoryYAML, "app")
	sp := startServe(t, dir)
	ctx := context.Background()
	ids := make([]string, 20)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := sp.client.Submit(ctx, "default", nil)
			if err != nil {
				errs <- err
				return
			}
			ids[i] = rec.ID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("submit: %v", err)
	}
	var all []*record.AttemptRecord
	for _, id := range ids {
		d := waitDetail(t, sp.client, id, 120*time.Second)
		if d.Run.State != status.RunSucceeded {
			t.Fatalf("run %s: %s %s", id, d.Run.State, d.Run.Message)
		}
		all = append(all, d.Attempts...)
	}
	if len(all) != 40 {
		t.Fatalf("want 40 attempts, got %d", len(all))
	}
	if n := record.MaxOverlap(all); n > 3 {
		t.Fatalf("%d attempts ran at once with serve.max_parallel 3", n)
	}
	// A run's record is final a moment before serve lets go of it (its
	// notifications and retention come first): wait for that.
	var h *client.Health
	waitFor(t, "serve to let go of the ended runs", 10*time.Second, func() bool {
		var err error
		if h, err = sp.client.Health(ctx); err != nil {
			t.Fatal(err)
		}
		return h.Running == 0
	})
	if h.PeakRunning != 3 || h.Queued != 0 || h.Running != 0 {
		t.Fatalf("health after the runs: %+v (want peak 3, nothing left)", h)
	}

	// kusaw run, runs, show and logs talk to serve, with the same output
	// as in-process.
	res := runKusaw(t, dir, "run")
	if res.code != 0 || !strings.Contains(res.stdout, "check: attempt 1 passed") || !strings.Contains(res.stdout, " succeeded in ") {
		t.Fatalf("kusaw run through serve: %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(sp.stderr.String(), `"message":"run queued"`) || strings.Count(sp.stderr.String(), `"message":"run queued"`) != 21 {
		t.Fatalf("serve did not log 21 queued runs:\n%s", sp.stderr.String())
	}
	// A bad pipeline name reads the same through serve as in-process.
	bad := runKusaw(t, dir, "run", "nope")
	badLocal := runKusawEnv(t, dir, []string{"KUSAW_NO_SERVE=1"}, "run", "nope")
	if bad.code != 2 || bad.stderr != badLocal.stderr || badLocal.code != 2 {
		t.Fatalf("unknown pipeline through serve: %d %q; in-process: %d %q", bad.code, bad.stderr, badLocal.code, badLocal.stderr)
	}
	list := runKusaw(t, dir, "runs")
	if list.code != 0 || strings.Count(list.stdout, "succeeded") != 21 {
		t.Fatalf("kusaw runs: %s", list.stdout)
	}
	show := runKusaw(t, dir, "show", ids[0])
	local := runKusawEnv(t, dir, []string{"KUSAW_NO_SERVE=1"}, "show", ids[0])
	if show.code != 0 || show.stdout != local.stdout {
		t.Fatalf("show through serve differs from in-process:\n%s\n---\n%s", show.stdout, local.stdout)
	}
	logs := runKusaw(t, dir, "logs", ids[0])
	localLogs := runKusawEnv(t, dir, []string{"KUSAW_NO_SERVE=1"}, "logs", ids[0])
	if logs.code != 0 || !strings.Contains(logs.stdout, "checked") || logs.stdout != localLogs.stdout {
		t.Fatalf("logs through serve:\n%s\n---\n%s", logs.stdout, localLogs.stdout)
	}
	sp.stop(t)
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", record.ServeSocketFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket outlived serve: %v", err)
	}
}

// runKusawEnv is runKusaw with extra environment.
func runKusawEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = append(testEnv(t, dir), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return result{out.String(), errb.String(), exitCode(err)}
}

func TestServeCancelAndFollow(t *testing.T) {
	dir := factoryDir(t, serveFactoryYAML, "app")
	sp := startServe(t, dir)
	ctx := context.Background()
	rec, err := sp.client.Submit(ctx, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	// kusaw logs -f follows through serve while the run goes.
	follow, out, _ := startKusaw(t, dir, "logs", rec.ID, "-f")
	// Follow the run's events over SSE while it runs.
	var mu sync.Mutex
	var types []string
	done := make(chan string, 1)
	go func() {
		st, err := sp.client.Follow(ctx, rec.ID, func(ev record.Event) {
			mu.Lock()
			types = append(types, ev.Type)
			mu.Unlock()
		})
		if err != nil {
			st = "error: " + err.Error()
		}
		done <- st
	}()
	waitFor(t, "the slow step to start", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ty := range types {
			if ty == record.EvProcessStarted {
				return true
			}
		}
		return false
	})
	waitFor(t, "logs -f to print the step's output", 10*time.Second, func() bool { return strings.Contains(out.String(), "waiting") })
	// Cancel through the API.
	res := runKusaw(t, dir, "cancel", rec.ID)
	if res.code != 0 {
		t.Fatalf("kusaw cancel through serve: %d %s %s", res.code, res.stdout, res.stderr)
	}
	select {
	case st := <-done:
		if st != string(status.RunCanceled) {
			t.Fatalf("event stream ended with %q", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the event stream did not end after the cancel")
	}
	mu.Lock()
	got := strings.Join(types, " ")
	mu.Unlock()
	for _, want := range []string{record.EvRunStarted, record.EvCancelRequested, record.EvAttemptFinished, record.EvRunFinished} {
		if !strings.Contains(got, want) {
			t.Fatalf("stream lacks %s: %s", want, got)
		}
	}
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs -f after the run ended: %v", err)
	}
	d := waitDetail(t, sp.client, rec.ID, 5*time.Second)
	if d.Attempts[0].Outcome != status.OutcomeCanceled || d.ExitCode != status.ExitInterrupted {
		t.Fatalf("after cancel: attempt %s, exit %d", d.Attempts[0].Outcome, d.ExitCode)
	}
	// kusaw run through serve: Ctrl-C cancels the run and exits 130.
	cmd, stdout, stderr := startKusaw(t, dir, "run", "slow")
	waitFor(t, "kusaw run to start its step", 20*time.Second, func() bool { return strings.Contains(stdout.String(), "wait: attempt 1/1 started") })
	_ = cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	if exitCode(err) != 130 || !strings.Contains(stdout.String(), "canceled in") {
		t.Fatalf("kusaw run through serve after SIGINT: exit %d\n%s\n%s", exitCode(err), stdout.String(), stderr.String())
	}
}

// TestServeKill9 kills serve with SIGKILL while attempts run, restarts it,
// and checks that every run ends (interrupted, or resumed and finished
// with serve.resume) and nothing is left behind.
func TestServeKill9(t *testing.T) {
	for _, resume := range []bool{false, true} {
		t.Run(fmt.Sprintf("resume=%v", resume), func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "go-on")
			// The long step runs in the sandbox with the proxy (a lease per
			// attempt) where bwrap works; recovery must clean up both.
			mode, network := "off", "open"
			if sandboxWorks(t) {
				mode, network = "required", "allowlist"
			}
			yaml := fmt.Sprintf(`version: 1
repos:
  app:
    path: app
sandbox:
  allow_read: [%s]
serve:
  max_parallel: 2
  resume: %v
pipelines:
  default: [first, long, last]
steps:
  first:
    run: [sh, -c, "echo one > one.txt"]
  long:
    run: [sh, -c, "echo started; i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo more >> one.txt"]
    sandbox: {mode: %s, network: %s}
  last:
    run: [sh, -c, "grep -q more one.txt"]
`, filepath.Dir(marker), resume, marker, mode, network)
			dir := factoryDir(t, yaml, "app")
			// serve's own temp folders (lease sockets of long attempt
			// paths) go here, to be checked at the end.
			tmp := t.TempDir()
			sp := startServeEnv(t, dir, []string{"TMPDIR=" + tmp})
			ctx := context.Background()
			var ids []string
			for i := 0; i < 4; i++ {
				rec, err := sp.client.Submit(ctx, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, rec.ID)
			}
			state := filepath.Join(dir, ".kusaw")
			waitFor(t, "two long attempts running", 30*time.Second, func() bool {
				n := 0
				for _, id := range ids {
					b, _ := os.ReadFile(filepath.Join(state, "runs", id, "steps", "long", "1", "stdout.log"))
					if strings.Contains(string(b), "started") {
						n++
					}
				}
				return n == 2
			})
			_ = sp.cmd.Process.Kill()
			_ = sp.cmd.Wait()
			// The steps die with serve (parent-death signal): nothing keeps
			// running unrecorded.
			waitFor(t, "the steps to die with serve", 10*time.Second, func() bool {
				out, _ := exec.Command("pgrep", "-f", marker).Output()
				return len(strings.TrimSpace(string(out))) == 0
			})
			checkRecordsIntact(t, state)

			if err := os.WriteFile(marker, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if resume {
				// Another kusaw command opens the state directory first and
				// does the recovery: serve still resumes serve's runs.
				if res := runKusawEnv(t, dir, []string{"KUSAW_NO_SERVE=1", "TMPDIR=" + tmp}, "runs"); res.code != 0 || !strings.Contains(res.stdout, "interrupted") {
					t.Fatalf("kusaw runs after the crash: %d\n%s%s", res.code, res.stdout, res.stderr)
				}
			}
			sp2 := startServeEnv(t, dir, []string{"TMPDIR=" + tmp})
			for _, id := range ids {
				d := waitDetail(t, sp2.client, id, 60*time.Second)
				want := status.RunInterrupted
				if resume {
					want = status.RunSucceeded
				}
				if d.Run.State != want {
					t.Fatalf("run %s after restart: %s (%s), want %s", id, d.Run.State, d.Run.Message, want)
				}
				for _, a := range d.Attempts {
					if a.Finished == nil || a.Outcome == "" {
						t.Fatalf("run %s: attempt %s/%d has no outcome", id, a.Step, a.Number)
					}
				}
			}
			logWant := "recovered a run left running by a crash"
			if resume {
				logWant = "resuming interrupted run"
			}
			if !strings.Contains(sp2.stderr.String(), logWant) {
				t.Fatalf("serve did not log %q:\n%s", logWant, sp2.stderr.String())
			}
			sp2.stop(t)
			checkRecordsIntact(t, state)
			checkNothingLeft(t, dir, state)
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("serve left temp folders: %v", left)
			}
			// Event logs verify up to their last seal (the ones the kill
			// cut short are continued or left with an unsealed tail).
			for _, id := range ids {
				for _, p := range eventFiles(t, filepath.Join(state, "runs", id)) {
					if res := runKusaw(t, dir, "log", "verify", p); res.code != 0 || !strings.Contains(res.stdout, ": OK") {
						t.Errorf("log verify %s: exit %d\n%s%s", p, res.code, res.stdout, res.stderr)
					}
				}
			}
		})
	}
}

func eventFiles(t *testing.T, runDir string) []string {
	var out []string
	_ = filepath.Walk(runDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Name() == "events.jsonl" {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// checkRecordsIntact: every record parses, and every line of every events
// file up to its end is whole JSON (a kill between two writes leaves no
// torn record behind).
func checkRecordsIntact(t *testing.T, state string) {
	t.Helper()
	_ = filepath.Walk(filepath.Join(state, "runs"), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		switch fi.Name() {
		case "run.json", "attempt.json":
			var m map[string]any
			b, _ := os.ReadFile(p)
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("%s is not whole JSON after kill -9: %v", p, err)
			}
		case "events.jsonl":
			f, _ := os.Open(p)
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			for n := 1; sc.Scan(); n++ {
				var m map[string]any
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Errorf("%s line %d is torn: %v", p, n, err)
				}
			}
		}
		return nil
	})
}

// checkNothingLeft: no worktree but the main checkout, no lease socket, no
// attempt temp folder, no kusaw socket once serve stopped.
func checkNothingLeft(t *testing.T, dir, state string) {
	t.Helper()
	wts := git(t, filepath.Join(dir, "app"), "worktree", "list", "--porcelain")
	if n := strings.Count(wts, "worktree "); n != 1 {
		t.Fatalf("worktrees left:\n%s", wts)
	}
	_ = filepath.Walk(state, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if fi.Mode()&os.ModeSocket != 0 {
			t.Errorf("socket left: %s", p)
		}
		if fi.IsDir() && (fi.Name() == "tmp" || fi.Name() == "worktrees") && strings.Contains(p, string(filepath.Separator)+"steps"+string(filepath.Separator)) {
			var in []string
			ents, _ := os.ReadDir(p)
			for _, e := range ents {
				in = append(in, e.Name())
			}
			att, _ := os.ReadFile(filepath.Join(filepath.Dir(p), record.AttemptFile))
			t.Errorf("attempt folder left: %s holding %q; its attempt.json: %.600s", p, in, att)
		}
		return nil
	})
}

// sandboxWorks reports whether kusaw can run a sandboxed command here.
func sandboxWorks(t *testing.T) bool {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		return false
	}
	return exec.Command(kusawBin, "sandbox", "check").Run() == nil
}

func TestServiceStatusAndInstall(t *testing.T) {
	dir := factoryDir(t, serveFactoryYAML, "app")
	res := runKusaw(t, dir, "service", "status")
	if res.code != 6 || !strings.Contains(res.stdout, "serve:     not running") || !strings.Contains(res.stdout, "kusaw serve") {
		t.Fatalf("status without serve: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := runKusaw(t, dir, "serve", "--log-level", "loud"); res.code != 2 || !strings.Contains(res.stderr, "--log-level") {
		t.Fatalf("serve --log-level loud: %d %s", res.code, res.stderr)
	}
	sp := startServe(t, dir, "--max-parallel", "5", "--log-level", "debug")
	if _, err := sp.client.Submit(context.Background(), "slow", nil); err != nil {
		t.Fatal(err)
	}
	res = runKusaw(t, dir, "service", "status", "--json")
	var st struct {
		Serve struct {
			Running     bool   `json:"running"`
			Socket      string `json:"socket"`
			PID         int    `json:"pid"`
			MaxParallel int    `json:"max_parallel"`
			Queued      int    `json:"queued"`
			Running2    int    `json:"running_runs"`
		} `json:"serve"`
		Sandbox struct {
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
			Fix       string `json:"fix"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, res.stdout)
	}
	want := 0
	if !st.Sandbox.Available {
		want = 4
		if st.Sandbox.Reason == "" || st.Sandbox.Fix == "" {
			t.Fatalf("an unavailable backend without reason or fix: %s", res.stdout)
		}
	}
	if res.code != want || !st.Serve.Running || st.Serve.PID != sp.cmd.Process.Pid || st.Serve.MaxParallel != 5 ||
		st.Serve.Socket != filepath.Join(dir, ".kusaw", record.ServeSocketFile) || st.Serve.Queued+st.Serve.Running2 != 1 {
		t.Fatalf("status with serve: exit %d (want %d)\n%s", res.code, want, res.stdout)
	}
	if !strings.Contains(sp.stderr.String(), `"message":"request"`) || !strings.Contains(sp.stderr.String(), `"path":"/v1/health"`) {
		t.Fatalf("--log-level debug does not log requests:\n%s", sp.stderr.String())
	}
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "cfg")}
	res = runKusawEnv(t, dir, env, "service", "install")
	if res.code != 0 {
		t.Fatalf("service install: %d %s %s", res.code, res.stdout, res.stderr)
	}
	units, _ := filepath.Glob(filepath.Join(home, "cfg", "systemd", "user", "kusaw-*.service"))
	if len(units) != 1 {
		t.Fatalf("unit files: %v\n%s", units, res.stdout)
	}
	unit := readFile(t, units[0])
	if !strings.Contains(unit, "ExecStart="+kusawBin+" serve -f "+filepath.Join(dir, "factory.yaml")) || !strings.Contains(res.stdout, unit) ||
		!strings.Contains(res.stdout, "systemctl --user enable --now "+filepath.Base(units[0])) {
		t.Fatalf("unit:\n%s\noutput:\n%s", unit, res.stdout)
	}
	res = runKusawEnv(t, dir, env, "service", "uninstall")
	if _, err := os.Stat(units[0]); res.code != 0 || !errors.Is(err, os.ErrNotExist) || !strings.Contains(res.stdout, "removed "+units[0]) {
		t.Fatalf("service uninstall: %d %s %v", res.code, res.stdout, err)
	}
	if res = runKusawEnv(t, dir, env, "service", "uninstall"); res.code != 5 {
		t.Fatalf("second uninstall: %d %s", res.code, res.stderr)
	}
}

// TestServeKill9AnyMoment kills serve at random moments of a busy queue,
// again and again, restarting it each time with serve.resume. Every record
// stays whole JSON, every events log verifies up to its last seal, and in
// the end every run has finished, with nothing left behind.
func TestServeKill9AnyMoment(t *testing.T) {
	yaml := `version: 1
repos:
  app:
    path: app
serve:
  max_parallel: 2
  resume: true
pipelines:
  default: [one, two, three]
steps:
  one:
    run: [sh, -c, "echo 1 >> log.txt; sleep 0.1"]
  two:
    run: [sh, -c, "echo 2 >> log.txt; sleep 0.2"]
  three:
    run: [sh, -c, "grep -q 2 log.txt"]
`
	dir := factoryDir(t, yaml, "app")
	state := filepath.Join(dir, ".kusaw")
	tmp := t.TempDir()
	seed := time.Now().UnixNano()
	if v, err := strconv.ParseInt(os.Getenv("KUSAW_KILL_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("kill delays from seed %d (KUSAW_KILL_SEED=%[1]d repeats them)", seed)
	delay := func(i int) time.Duration { return time.Duration((seed/int64(i+1))%700+50) * time.Millisecond }
	var ids []string
	for round := 0; round < 4; round++ {
		sp := startServeEnv(t, dir, []string{"TMPDIR=" + tmp})
		for j := 0; j < 2; j++ {
			rec, err := sp.client.Submit(context.Background(), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.ID)
		}
		time.Sleep(delay(round))
		_ = sp.cmd.Process.Kill()
		_ = sp.cmd.Wait()
		checkRecordsIntact(t, state)
	}
	sp := startServeEnv(t, dir, []string{"TMPDIR=" + tmp})
	for _, id := range ids {
		d := waitDetail(t, sp.client, id, 120*time.Second)
		if d.Run.State != status.RunSucceeded {
			t.Errorf("run %s: %s (%s)", id, d.Run.State, d.Run.Message)
		}
	}
	sp.stop(t)
	checkRecordsIntact(t, state)
	checkNothingLeft(t, dir, state)
	for _, id := range ids {
		for _, p := range eventFiles(t, filepath.Join(state, "runs", id)) {
			if res := runKusaw(t, dir, "log", "verify", p); res.code != 0 || !strings.Contains(res.stdout, ": OK") {
				t.Errorf("log verify %s: exit %d\n%s%s", p, res.code, res.stdout, res.stderr)
			}
		}
	}
}

// TestServeSIGTERM: serve stops taking runs, gives the running attempt its
// grace period, then interrupts it and records it; the queued run is
// recorded interrupted too; nothing is left behind.
func TestServeSIGTERM(t *testing.T) {
	dir := factoryDir(t, serveFactoryYAML, "app")
	sp := startServe(t, dir, "--max-parallel", "1")
	ctx := context.Background()
	running, err := sp.client.Submit(ctx, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := sp.client.Submit(ctx, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, ".kusaw")
	waitFor(t, "the step to start", 20*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(state, "runs", running.ID, "steps", "wait", "1", "stdout.log"))
		return strings.Contains(string(b), "waiting")
	})
	start := time.Now()
	sp.stop(t) // SIGTERM; --grace=2s, then SIGTERM to the step, SIGKILL after KUSAW_KILL_GRACE=2s
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("serve took %s to stop", d)
	}
	st := &factory.State{Dir: state}
	for _, id := range []string{running.ID, queued.ID} {
		r, err := st.LoadRun(id)
		if err != nil || r.State != status.RunInterrupted || r.Reason != status.ReasonRunInterrupted {
			t.Fatalf("run %s after SIGTERM: %+v %v", id, r, err)
		}
	}
	r, _ := st.LoadRun(running.ID)
	atts, _ := st.Attempts(r)
	if len(atts) != 1 || atts[0].Outcome != status.OutcomeInterrupted {
		t.Fatalf("the running attempt after SIGTERM: %+v", atts)
	}
	for _, want := range []string{"stopping: no new runs", "interrupting run after the stop grace period", "kusaw serve stopped"} {
		if !strings.Contains(sp.stderr.String(), want) {
			t.Fatalf("serve's log lacks %q:\n%s", want, sp.stderr.String())
		}
	}
	checkRecordsIntact(t, state)
	checkNothingLeft(t, dir, state)
}

// TestServeRunOutputMatchesInProcess: kusaw run prints the same lines
// through serve as in-process, egress refusal summary included.
func TestServeRunOutputMatchesInProcess(t *testing.T) {
	step := `    run: [sh, -c, "echo fetching"]`
	if sandboxWorks(t) {
		need(t, "curl")
		step = `    run: [sh, -c, "curl -fs -o /dev/null http://blocked.invalid/; curl -fs -o /dev/null http://other.invalid:8080/; echo done"]
    sandbox: {mode: required, network: allowlist}`
	}
	yaml := `version: 1
repos:
  app:
    path: app
pipelines:
  default: [prep, fetch, fail]
steps:
  prep:
    run: [sh, -c, "echo prep > p.txt; echo \"param ${KUSAW_PARAM_WHO:-none}\""]
  fetch:
` + step + `
  fail:
    attempts: 2
    run: [sh, -c, "echo no >&2; exit 4"]
`
	dir := factoryDir(t, yaml, "app")
	local := runKusawEnv(t, dir, []string{"KUSAW_NO_SERVE=1"}, "run")
	startServe(t, dir)
	served := runKusaw(t, dir, "run")
	norm := func(s string) string {
		for _, r := range []struct{ re, with string }{
			{`\d{8}-\d{6}-[0-9a-f]{4}`, "RUN"},
			{`(?m)^\d\d:\d\d:\d\d `, ""},
			{`\b\d+(\.\d+)?(ms|s)\b|\b\d+m\d+s\b`, "DUR"},
			{`\b[0-9a-f]{10}\b`, "SHA"},
		} {
			s = regexp.MustCompile(r.re).ReplaceAllString(s, r.with)
		}
		return s
	}
	if local.code != 1 || served.code != 1 {
		t.Fatalf("exit codes: in-process %d, through serve %d", local.code, served.code)
	}
	if norm(local.stdout) != norm(served.stdout) || norm(local.stderr) != norm(served.stderr) {
		t.Fatalf("output differs.\nin-process:\n%s%s\nthrough serve:\n%s%s", local.stdout, local.stderr, served.stdout, served.stderr)
	}
	// Run parameters reach the steps both ways; bad ones are usage errors
	// worded the same.
	for _, env := range [][]string{{"KUSAW_NO_SERVE=1"}, nil} {
		res := runKusawEnv(t, dir, env, "run", "--param", "WHO=world", "--param", "N=3")
		last := filepath.Join(dir, ".kusaw", "runs", lastRun(t, dir))
		if res.code != 1 || !strings.Contains(readFile(t, filepath.Join(last, "params.json")), `"WHO":"world"`) ||
			!strings.Contains(readFile(t, filepath.Join(last, "steps", "prep", "1", "stdout.log")), "param world") {
			t.Fatalf("kusaw run --param (%v): %d %s", env, res.code, res.stderr)
		}
	}
	badL := runKusawEnv(t, dir, []string{"KUSAW_NO_SERVE=1"}, "run", "--param", "A-B=1")
	badS := runKusaw(t, dir, "run", "--param", "A-B=1")
	if badL.code != 2 || badS.code != 2 || badL.stderr != badS.stderr {
		t.Fatalf("bad --param: in-process %d %q, through serve %d %q", badL.code, badL.stderr, badS.code, badS.stderr)
	}
	if sandboxWorks(t) && !strings.Contains(served.stderr, "the egress proxy refused 2 connection(s)") {
		t.Fatalf("no refusal summary through serve:\n%s", served.stderr)
	}
}

// lastRun is the id of the newest run.
func lastRun(t *testing.T, dir string) string {
	t.Helper()
	// Run ids sort by the second; the record's creation time is finer.
	st, err := factory.OpenState(filepath.Join(dir, ".kusaw"))
	if st == nil {
		t.Fatal(err)
	}
	runs, err := st.Runs()
	if err != nil || len(runs) == 0 {
		t.Fatalf("no runs: %v", err)
	}
	return runs[0].ID
}
