package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// The cluster end to end (docs/cluster.md): a real serve with its embedded
// NATS server and real `kusaw worker` processes on loopback, each with its
// own state folder. When the test is root the workers run as uid 65534
// and serve's folder is 0700: they cannot read the repositories and get
// the code only as bundles.

func clusterYAML(sandbox string, sleep string, lostAfter string) string {
	return `version: 1
repos:
  app: {path: app}
serve:
  max_parallel: 12
  cluster: {listen: "127.0.0.1:0", local_worker: false, lost_after: ` + lostAfter + `}
pipelines:
  default: [one, two]
steps:
  one:
    sandbox: ` + sandbox + `
    env:
      TOKEN: {secret: cluster.token}
    run: [sh, -c, 'test "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" = eb4ed2822b27418e && sleep ` + sleep + ` && echo "one $KUSAW_RUN" > one.txt']
  two:
    sandbox: ` + sandbox + `
    run: [sh, -c, 'test -s one.txt && echo two > two.txt']
`
}

// clusterSandbox is the steps' sandbox mode: required where the sandbox
// works; elsewhere off, except under CI, where a missing sandbox fails.
func clusterSandbox(t *testing.T) string {
	if sandboxWorks(t) {
		return "required"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the sandbox does not work here: the cluster's e2e runs sandboxed steps in CI")
	}
	t.Log("the sandbox does not work here: steps run with sandbox off")
	return "\"off\""
}

func workerUID() int {
	if os.Geteuid() == 0 {
		return 65534
	}
	return os.Geteuid()
}

// clusterSecret reaches the workers sealed; it must never be found in
// clear on disk.
const clusterSecret = "cluster-s3cret-9f2"

const clusterAPIToken = "cluster-web-token-0123456789"

type clusterRig struct {
	dir string
	sp  *serveProc
}

func startClusterServe(t *testing.T, yaml string) *clusterRig {
	t.Helper()
	return startClusterServeSecrets(t, yaml, nil)
}

// startClusterServeSecrets is startClusterServe with more secrets in
// serve's store.
func startClusterServeSecrets(t *testing.T, yaml string, more map[string]string) *clusterRig {
	t.Helper()
	dir := factoryDir(t, yaml, "app")
	// The step's secret is in serve's secret store only.
	st := secretstore.OpenDir(filepath.Join(dir, "secrets"))
	if err := st.Set("cluster.token", clusterSecret); err != nil {
		t.Fatal(err)
	}
	for k, v := range more {
		if err := st.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	// The API token, for a factory that also sets serve.listen.
	if err := st.Set(serve.TokenSecretKey, clusterAPIToken); err != nil {
		t.Fatal(err)
	}
	// Workers must not read the factory's folder.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sp := startServe(t, dir)
	return &clusterRig{dir: dir, sp: sp}
}

type workerProc struct {
	name  string
	cmd   *exec.Cmd
	state string
	log   *syncBuffer
	env   []string // more environment
}

// startWorker joins a worker with a fresh token and starts it as the
// worker uid, in a state folder of its own outside /tmp (the sandbox's
// /tmp is private).
func (r *clusterRig) startWorker(t *testing.T, name string, extra ...string) *workerProc {
	t.Helper()
	return r.startWorkerEnv(t, name, nil, extra...)
}

// startWorkerEnv is startWorker with more environment for the worker.
func (r *clusterRig) startWorkerEnv(t *testing.T, name string, env []string, extra ...string) *workerProc {
	t.Helper()
	tok := runKusaw(t, r.dir, "cluster", "token")
	if tok.code != 0 {
		t.Fatalf("kusaw cluster token: %d %s", tok.code, tok.stderr)
	}
	state, err := os.MkdirTemp("/var/tmp", "kusaw-worker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	os.Chmod(state, 0o755)
	w := &workerProc{name: name, state: state, log: &syncBuffer{}, env: env}
	w.start(t, append([]string{"--join", strings.TrimSpace(tok.stdout)}, extra...)...)
	return w
}

func (w *workerProc) start(t *testing.T, extra ...string) {
	t.Helper()
	uid := workerUID()
	args := append([]string{"worker", "--name", w.name, "--state-dir", filepath.Join(w.state, "w"), "--max-parallel", "2"}, extra...)
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = w.state
	cmd.Env = append(testEnv(t, w.state), w.env...)
	cmd.Stderr = w.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if uid != os.Geteuid() {
		chownAll(t, w.state, uid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.cmd = cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("worker %s:\n%s", w.name, w.log.String())
		}
	})
}

// waitWorkers waits until n workers send heartbeats.
func (r *clusterRig) waitWorkers(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d workers", n), 30*time.Second, func() bool {
		ws, err := r.sp.client.Workers(context.Background())
		if err != nil {
			return false
		}
		live := 0
		for _, w := range ws {
			if w.LastHeartbeat != nil && !w.Lost {
				live++
			}
		}
		return live >= n
	})
}

func (r *clusterRig) submit(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		rec, err := r.sp.client.Submit(context.Background(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	return ids
}

// checkRuns: every run succeeded, its run branch holds exactly both steps'
// commits (no duplicate), and every log verifies --strict.
func (r *clusterRig) checkRuns(t *testing.T, ids []string) map[string]int {
	return r.checkRunsVerify(t, ids, true)
}

// checkRunsVerify is checkRuns; without strict, logs verify up to their
// last seal (what a kill -9 of their writer leaves).
func (r *clusterRig) checkRunsVerify(t *testing.T, ids []string, strict bool) map[string]int {
	t.Helper()
	perWorker := map[string]int{}
	for _, id := range ids {
		d := waitDetail(t, r.sp.client, id, 3*time.Minute)
		if d.Run.State != status.RunSucceeded {
			for _, a := range d.Attempts {
				t.Logf("run %s attempt %s/%d on %q: %s %s %s", id, a.Step, a.Number, a.Worker, a.Outcome, a.Reason, a.Message)
			}
			t.Fatalf("run %s: %s (%s)", id, d.Run.State, d.Run.Message)
		}
		br := d.Run.Repos[0]
		if n := git(t, filepath.Join(r.dir, "app"), "rev-list", "--count", br.BaseSHA+".."+br.Branch); n != "2" {
			t.Errorf("run %s: %s commits on its branch, want 2 (one per step)", id, n)
		}
		if got := git(t, filepath.Join(r.dir, "app"), "show", br.Branch+":one.txt"); got != "one "+id {
			t.Errorf("run %s: one.txt %q", id, got)
		}
		for _, a := range d.Attempts {
			if a.Outcome == status.OutcomePassed {
				if a.Worker == "" {
					t.Errorf("run %s attempt %s/%d: no worker in attempt.json", id, a.Step, a.Number)
				}
				perWorker[a.Worker]++
			}
		}
	}
	// A run is final in the API a moment before run.json names its
	// events' last seal (serve seals after notifications had their
	// first try): verify once every run's record is complete.
	for _, id := range ids {
		p := filepath.Join(r.dir, ".kusaw", "runs", id, "run.json")
		waitFor(t, "run "+id+"'s record to name its last seal", 30*time.Second, func() bool {
			b, err := os.ReadFile(p)
			return err == nil && strings.Contains(string(b), `"events_seal"`)
		})
	}
	if strict {
		verifyRecords(t, os.Geteuid(), r.dir)
	} else {
		verifyRecordsLoose(t, r.dir)
	}
	return perWorker
}

func TestClusterRunsOnWorkers(t *testing.T) {
	need(t, "git")
	r := startClusterServe(t, clusterYAML(clusterSandbox(t), "0.3", "15s"))
	var workers []*workerProc
	for i := 1; i <= 3; i++ {
		workers = append(workers, r.startWorker(t, fmt.Sprintf("w%d", i)))
	}
	r.waitWorkers(t, 3)
	ids := r.submit(t, 12)
	per := r.checkRuns(t, ids)
	if len(per) != 3 {
		t.Errorf("attempts by worker %v: want all three workers used", per)
	}
	// kusaw workers lists them; --json too.
	res := runKusaw(t, r.dir, "workers")
	for i := 1; i <= 3; i++ {
		if !strings.Contains(res.stdout, fmt.Sprintf("w%d", i)) {
			t.Errorf("kusaw workers:\n%s", res.stdout)
		}
	}
	// The secret is in clear nowhere: serve's records, JetStream's store
	// files, the workers' folders.
	roots := []string{filepath.Join(r.dir, ".kusaw")}
	for _, w := range workers {
		roots = append(roots, w.state)
	}
	for _, root := range roots {
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), clusterSecret) {
					t.Errorf("the secret is in clear in %s", p)
				}
			}
			return nil
		})
	}
	if _, err := os.Stat(filepath.Join(r.dir, ".kusaw", "cluster", "jetstream")); err != nil {
		t.Errorf("JetStream's store is not where the grep looked: %v", err)
	}
	var js struct{ Workers []client.Worker }
	if err := json.Unmarshal([]byte(runKusaw(t, r.dir, "workers", "--json").stdout), &js); err != nil || len(js.Workers) != 3 {
		t.Errorf("kusaw workers --json: %v %+v", err, js)
	}
}

// A worker killed with kill -9 in the middle of attempts: its attempts end
// lost and run again elsewhere, every run succeeds without a duplicate
// commit, and the logs verify.
func TestClusterWorkerKilled(t *testing.T) {
	need(t, "git")
	r := startClusterServe(t, clusterYAML(clusterSandbox(t), "3", "3s"))
	victim := r.startWorker(t, "victim")
	r.waitWorkers(t, 1)
	ids := r.submit(t, 3)
	// The victim alone holds the first attempts; kill it once it runs two.
	waitFor(t, "the victim to run attempts", 30*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		return len(ws) == 1 && ws[0].Running == 2
	})
	// Running counts an attempt from its claim, before its secrets, code
	// and folder are fetched and made: kill once the folders exist, so
	// that the restart below has something of its previous life to clean.
	runs := filepath.Join(victim.state, "w", "state", "runs")
	waitFor(t, "the victim's attempt folders", 30*time.Second, func() bool {
		ents, _ := os.ReadDir(runs)
		return len(ents) > 0
	})
	_ = syscall.Kill(-victim.cmd.Process.Pid, syscall.SIGKILL)
	_ = victim.cmd.Wait()
	r.startWorker(t, "s1")
	r.startWorker(t, "s2")
	r.checkRuns(t, ids)
	lost := 0
	for _, id := range ids {
		d := waitDetail(t, r.sp.client, id, time.Second)
		for _, a := range d.Attempts {
			if a.Outcome == status.OutcomeLost {
				lost++
				if a.Worker != "victim" || a.Reason != status.ReasonLost {
					t.Errorf("lost attempt %+v", a)
				}
			}
			if a.Outcome == status.OutcomePassed && a.Worker == "victim" && a.Step == "one" {
				t.Errorf("run %s: the killed worker passed step one", id)
			}
		}
	}
	if lost != 2 {
		t.Errorf("%d lost attempts, want the victim's 2", lost)
	}
	// The killed worker starts again without a token (its enrollment is
	// in its state folder) and removes what the kill left behind.
	if ents, _ := os.ReadDir(runs); len(ents) == 0 {
		t.Fatalf("the kill left nothing in %s: the clean-up below proves nothing", runs)
	}
	victim.log = &syncBuffer{}
	victim.start(t)
	waitFor(t, "the restarted worker's heartbeat", 30*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		for _, w := range ws {
			if w.Name == "victim" && !w.Lost {
				return true
			}
		}
		return false
	})
	if ents, _ := os.ReadDir(runs); len(ents) != 0 {
		t.Errorf("the restarted worker left %d attempt folders of its previous life", len(ents))
	}
}

// A worker stopped (SIGSTOP) past lost_after and then resumed reports
// late: its result is fenced (recorded, never merged) and the attempt ran
// again elsewhere.
func TestClusterStoppedWorkerFenced(t *testing.T) {
	need(t, "git")
	r := startClusterServe(t, clusterYAML(clusterSandbox(t), "2", "2s"))
	sleeper := r.startWorker(t, "sleeper")
	r.waitWorkers(t, 1)
	ids := r.submit(t, 1)
	waitFor(t, "the sleeper to claim", 30*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		return len(ws) == 1 && ws[0].Running == 1
	})
	_ = syscall.Kill(-sleeper.cmd.Process.Pid, syscall.SIGSTOP)
	other := r.startWorker(t, "other")
	_ = other
	d := waitDetail(t, r.sp.client, ids[0], 2*time.Minute)
	_ = syscall.Kill(-sleeper.cmd.Process.Pid, syscall.SIGCONT)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("run: %s %s", d.Run.State, d.Run.Message)
	}
	fenced := filepath.Join(r.dir, ".kusaw", "cluster", "fenced.jsonl")
	waitFor(t, "the sleeper's late result to be fenced", 30*time.Second, func() bool {
		b, _ := os.ReadFile(fenced)
		return strings.Contains(string(b), `"worker":"sleeper"`)
	})
	r.checkRuns(t, ids)
	if d.Attempts[0].Outcome != status.OutcomeLost || d.Attempts[0].Worker != "sleeper" {
		t.Errorf("first attempt %+v: want lost on the sleeper", d.Attempts[0])
	}
}

// A worker without an enrollment, with a forged identity, or with a token
// used twice is refused (exit 10); nothing of serve's is given to it.
func TestClusterEnrollmentRefused(t *testing.T) {
	need(t, "git")
	r := startClusterServe(t, clusterYAML(`"off"`, "0", "15s"))
	state := t.TempDir()
	res := runKusaw(t, state, "worker", "--state-dir", filepath.Join(state, "none"))
	if res.code != int(status.ExitNotEnrolled) || !strings.Contains(res.stderr, "has not joined") {
		t.Fatalf("an unenrolled worker: exit %d %s", res.code, res.stderr)
	}
	good := r.startWorker(t, "good")
	r.waitWorkers(t, 1)
	// A forger copies the good worker's identity file but replaces the
	// keys with its own: serve does not know them.
	b, err := os.ReadFile(filepath.Join(good.state, "w", "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id map[string]any
	json.Unmarshal(b, &id)
	fresh := runKusaw(t, state, "worker", "--state-dir", filepath.Join(state, "x"), "--join", "kusaw-join-1.e30")
	if fresh.code != int(status.ExitNotEnrolled) {
		t.Fatalf("a damaged token: exit %d %s", fresh.code, fresh.stderr)
	}
	forged := filepath.Join(state, "forged")
	os.MkdirAll(forged, 0o700)
	other, err := cluster.NewIdentity("good")
	if err != nil {
		t.Fatal(err)
	}
	id["user_seed"], id["curve_seed"] = other.UserSeed, other.CurveSeed
	out, _ := json.Marshal(id)
	os.WriteFile(filepath.Join(forged, "identity.json"), out, 0o600)
	res = runKusaw(t, state, "worker", "--state-dir", forged)
	if res.code != int(status.ExitNotEnrolled) {
		t.Fatalf("a forged identity: exit %d %s", res.code, res.stderr)
	}
	// A token works once.
	tok := strings.TrimSpace(runKusaw(t, r.dir, "cluster", "token").stdout)
	first := runKusawTimeout(t, state, 3*time.Second, "worker", "--state-dir", filepath.Join(state, "a"), "--name", "a", "--join", tok)
	if !strings.Contains(first.stderr, "enrolled") {
		t.Fatalf("first use of a token: %d %s", first.code, first.stderr)
	}
	second := runKusaw(t, state, "worker", "--state-dir", filepath.Join(state, "b"), "--name", "b", "--join", tok)
	if second.code != int(status.ExitNotEnrolled) {
		t.Fatalf("a token used twice: exit %d %s", second.code, second.stderr)
	}
	// A token for pool release does not enroll a worker for pool gpu; it
	// does for release, and kusaw workers shows what each may take.
	rel := strings.TrimSpace(runKusaw(t, r.dir, "cluster", "token", "--pool", "release").stdout)
	wrong := runKusaw(t, state, "worker", "--state-dir", filepath.Join(state, "c"), "--name", "c", "--join", rel, "--pool", "gpu")
	if wrong.code != int(status.ExitNotEnrolled) || !strings.Contains(wrong.stderr, "allows pools release, not gpu") {
		t.Fatalf("a release token for pool gpu: exit %d %s", wrong.code, wrong.stderr)
	}
	right := runKusawTimeout(t, state, 3*time.Second, "worker", "--state-dir", filepath.Join(state, "c"), "--name", "c", "--join", rel)
	if !strings.Contains(right.stderr, "ready (pools release,") {
		t.Fatalf("a release token without --pool: %d %s", right.code, right.stderr)
	}
	again := runKusaw(t, state, "worker", "--state-dir", filepath.Join(state, "c"), "--pool", "gpu")
	if again.code != int(status.ExitNotEnrolled) || !strings.Contains(again.stderr, "allows pools release only") {
		t.Fatalf("an enrolled release worker asked for pool gpu: exit %d %s", again.code, again.stderr)
	}
	if bad := runKusaw(t, r.dir, "cluster", "token", "--pool", "a", "--any-pool"); bad.code != int(status.ExitUsage) {
		t.Fatalf("--pool with --any-pool: exit %d %s", bad.code, bad.stderr)
	}
	ls := runKusaw(t, r.dir, "workers", "--json")
	var listed struct {
		Workers []struct {
			Name    string   `json:"name"`
			Allowed []string `json:"allowed_pools"`
		} `json:"workers"`
	}
	json.Unmarshal([]byte(ls.stdout), &listed)
	allowed := map[string]string{}
	for _, w := range listed.Workers {
		allowed[w.Name] = strings.Join(w.Allowed, ",")
	}
	if allowed["good"] != "default" || allowed["c"] != "release" {
		t.Fatalf("kusaw workers --json: %s", ls.stdout)
	}
	if table := runKusaw(t, r.dir, "workers").stdout; !strings.Contains(table, "ALLOWED") {
		t.Fatalf("kusaw workers: %s", table)
	}
}

// runKusawTimeout runs kusaw until it exits or limit passes (then SIGTERM).
func runKusawTimeout(t *testing.T, dir string, limit time.Duration, args ...string) result {
	t.Helper()
	cmd, out, errb := startKusaw(t, dir, args...)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(limit):
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err = <-done
	}
	return result{out.String(), errb.String(), exitCode(err)}
}

var _ = record.EventsFile

// kill -9 of serve while attempts run on workers, then a restart with
// serve.resume: the workers reconnect by themselves and the attempts they
// hold carry on (and finish while serve is down: their uploads and results
// wait); the restarted serve re-attaches to them and takes their reports
// (none runs again, none is fenced), and every run ends succeeded.
func TestClusterServeKilled(t *testing.T) {
	need(t, "git")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	yaml := strings.Replace(clusterYAML(clusterSandbox(t), "3", "5s"), `listen: "127.0.0.1:0"`, `listen: "`+addr+`"`, 1)
	yaml = strings.Replace(yaml, "max_parallel: 12", "max_parallel: 12\n  resume: true", 1)
	r := startClusterServe(t, yaml)
	for i := 1; i <= 2; i++ {
		r.startWorker(t, fmt.Sprintf("k%d", i))
	}
	r.waitWorkers(t, 2)
	ids := r.submit(t, 4)
	var held []string
	waitFor(t, "attempts running on the workers", 30*time.Second, func() bool {
		held = held[:0]
		for _, id := range ids {
			d, err := r.sp.client.Detail(context.Background(), id)
			if err != nil {
				return false
			}
			for _, a := range d.Attempts {
				if a.Worker != "" && a.Finished == nil {
					held = append(held, fmt.Sprintf("%s/%s/%d", id, a.Step, a.Number))
				}
			}
		}
		return len(held) >= 3
	})
	_ = r.sp.cmd.Process.Kill()
	_ = r.sp.cmd.Wait()
	// Down longer than the step sleeps: the held attempts finish while
	// serve is gone, and their workers keep their reports until it is back
	// (the client holds what it sends while it reconnects; a longer outage
	// is retried, cluster/worker TestReportWaitsForServe).
	time.Sleep(3500 * time.Millisecond)
	r.sp = startServe(t, r.dir)
	// Lines written after the last seal before the kill are reported as
	// unsealed when the events file is continued: the logs verify up to
	// their last seal.
	r.checkRunsVerify(t, ids, false)
	for _, h := range held {
		parts := strings.Split(h, "/")
		dir := filepath.Join(r.dir, ".kusaw", "runs", parts[0], "steps", parts[1], parts[2])
		var a record.AttemptRecord
		b, err := os.ReadFile(filepath.Join(dir, record.AttemptFile))
		if err == nil {
			err = json.Unmarshal(b, &a)
		}
		if err != nil {
			t.Fatalf("attempt %s: %v", h, err)
		}
		if a.Outcome != status.OutcomePassed || a.Worker == "" {
			t.Errorf("attempt %s held by a worker when serve died: %s %s %q (want passed, re-attached)", h, a.Outcome, a.Reason, a.Message)
		}
		ev, _ := os.ReadFile(filepath.Join(dir, record.EventsFile))
		if !strings.Contains(string(ev), `"type":"`+record.EvClusterReattached+`"`) {
			t.Errorf("attempt %s: no %s event", h, record.EvClusterReattached)
		}
	}
	// Nothing ran twice: a run's step one has one attempt unless its
	// work was still unclaimed when serve died.
	for _, id := range ids {
		d, _ := r.sp.client.Detail(context.Background(), id)
		for _, a := range d.Attempts {
			if a.Outcome == status.OutcomeLost || (a.Worker != "" && a.Outcome != status.OutcomePassed) {
				t.Errorf("run %s attempt %s/%d on %q: %s %s %s", id, a.Step, a.Number, a.Worker, a.Outcome, a.Reason, a.Message)
			}
		}
	}
	// A result is fenced only for an attempt serve did not know was
	// claimed when it died (the claim raced the kill): it ran again.
	if b, err := os.ReadFile(filepath.Join(r.dir, ".kusaw", "cluster", "fenced.jsonl")); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var f struct{ Attempt string }
			if json.Unmarshal([]byte(line), &f) == nil && slices.Contains(held, f.Attempt) {
				t.Errorf("the result of %s, which serve re-attached to, was fenced: %s", f.Attempt, line)
			}
		}
	}
}

// The web page lists the workers and names the worker of each attempt;
// /metrics answers in the Prometheus text format with the cluster's
// metrics.
func TestClusterWebPageAndMetrics(t *testing.T) {
	need(t, "git")
	bin := needChromium(t)
	yaml := strings.Replace(clusterYAML(`"off"`, "0", "15s"), "max_parallel: 12", "max_parallel: 12\n  listen: 127.0.0.1:0", 1)
	r := startClusterServe(t, yaml)
	token := clusterAPIToken
	r.startWorker(t, "webw")
	r.waitWorkers(t, 1)
	ids := r.submit(t, 1)
	r.checkRuns(t, ids)
	var info client.ServeInfo
	b, err := os.ReadFile(filepath.Join(r.dir, ".kusaw", record.ServeInfoFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Listen == "" || info.Cluster == "" {
		t.Fatalf("serve.json: %v %s", err, b)
	}
	base := "http://" + info.Listen
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`kusaw_cluster_attempts_running{worker="webw"}`, "kusaw_cluster_dispatch_latency_seconds_count 2", `kusaw_cluster_bundle_bytes_total{direction="out"}`, "kusaw_cluster_lost_attempts_total 0", "kusaw_runs_queued 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	c := startChromium(t, bin)
	if err := c.call("Page.navigate", map[string]any{"url": base + "/?token=" + token}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workers table", 20*time.Second, func() bool {
		v, _ := c.eval(`[...document.querySelectorAll("#workers tbody td")].some(td => td.textContent === "webw")`)
		return v == true
	})
	// Each worker's allowed pools (its join token's).
	if v, _ := c.eval(`[...document.querySelectorAll("#workers tbody td.allowed")].map(td => td.textContent).join("|")`); v != "default" {
		t.Errorf("the workers table's allowed pools: %v", v)
	}
	if err := c.call("Page.navigate", map[string]any{"url": base + "/#/runs/" + ids[0]}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the attempts table naming the worker", 20*time.Second, func() bool {
		v, _ := c.eval(`[...document.querySelectorAll("#attempts tbody td")].filter(td => td.textContent === "webw").length`)
		n, _ := v.(float64)
		return n == 2
	})
}

// A remote attempt under the allowlist: the worker's proxy writes its
// egress.log and seals it with the worker's enrolled key; it comes back
// whole, and kusaw log verify --strict on serve checks it against that key.
// A log sealed by a key serve never enrolled does not verify.
func TestClusterEgressLogVerifies(t *testing.T) {
	need(t, "git")
	if !sandboxWorks(t) {
		if os.Getenv("CI") == "true" {
			t.Fatal("the sandbox does not work here: the allowlist needs it")
		}
		t.Skip("the sandbox does not work here")
	}
	need(t, "curl")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from upstream") }))
	defer up.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	yaml := `version: 1
repos:
  app: {path: app}
serve:
  cluster: {listen: "127.0.0.1:0", local_worker: false}
pipelines:
  default: [fetch]
steps:
  fetch:
    sandbox:
      mode: required
      network: allowlist
      egress:
        allow: ["localhost:` + port + `"]
    run: [sh, -c, 'unset NO_PROXY no_proxy; curl -fsS http://localhost:` + port + `/ > got.txt && ! curl -fs -o /dev/null http://blocked.invalid/']
`
	r := startClusterServe(t, yaml)
	r.startWorker(t, "egw")
	r.waitWorkers(t, 1)
	ids := r.submit(t, 1)
	d := waitDetail(t, r.sp.client, ids[0], 2*time.Minute)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", d.Run.State, d.Run.Message)
	}
	logf := filepath.Join(r.dir, ".kusaw", "runs", ids[0], "steps", "fetch", "1", record.EgressLogFile)
	b, err := os.ReadFile(logf)
	if err != nil || !strings.Contains(string(b), "blocked.invalid") {
		t.Fatalf("egress.log from the worker: %v\n%s", err, b)
	}
	res := runKusaw(t, r.dir, "log", "verify", "--strict", logf)
	if res.code != 0 || !strings.Contains(res.stdout, "sealed by worker egw") {
		t.Fatalf("log verify of the worker's egress.log: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	ev, _ := os.ReadFile(filepath.Join(filepath.Dir(logf), record.EventsFile))
	if !strings.Contains(string(ev), `"type":"cluster.egress_log"`) || !strings.Contains(string(ev), `"verified":true`) {
		t.Errorf("serve did not record the egress log's check:\n%s", ev)
	}
	// Attacker's side: the attempt record names a worker serve never
	// enrolled (a forger's own key): the log does not verify.
	ap := filepath.Join(filepath.Dir(logf), record.AttemptFile)
	ab, _ := os.ReadFile(ap)
	var am map[string]any
	if err := json.Unmarshal(ab, &am); err != nil || am["worker"] != "egw" {
		t.Fatalf("attempt.json: %v %v", err, am["worker"])
	}
	am["worker"] = "forger"
	ab, _ = json.Marshal(am)
	os.WriteFile(ap, ab, 0o644)
	if res := runKusaw(t, r.dir, "log", "verify", "--strict", logf); res.code != int(status.ExitVerifyFailed) {
		t.Fatalf("an egress.log of an unknown worker verified: exit %d\n%s", res.code, res.stdout)
	}
}

// verifyRecordsLoose runs kusaw log verify (not --strict) on every log.
func verifyRecordsLoose(t *testing.T, dir string) {
	t.Helper()
	var logs []string
	filepath.Walk(filepath.Join(dir, ".kusaw", "runs"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && (fi.Name() == "events.jsonl" || fi.Name() == "egress.log") {
			logs = append(logs, p)
		}
		return nil
	})
	if res := runKusaw(t, dir, append([]string{"log", "verify"}, logs...)...); res.code != 0 {
		t.Errorf("log verify: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}
