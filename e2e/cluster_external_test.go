package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/natstest"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// docs/cluster.md's external-NATS path as an operator follows it: kusaw
// cluster nats-config writes the configuration of three servers, three
// real nats-server processes (built from the Go module proxy at go.mod's
// version, cached) start from it, serve gets the printed serve.cluster
// block and the signing key through kusaw config set --secret, and three
// workers join with tokens. Then the faults, one after another on the
// same cluster.

// natsServerBin builds nats-server at the version kusaw links (the Go
// module proxy's copy, through the module cache) once, and keeps it in
// the user's cache folder.
func natsServerBin(t *testing.T) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(self))
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2")
	list.Dir = root
	out, err := list.Output()
	ver := strings.TrimSpace(string(out))
	if err != nil || ver == "" {
		t.Fatalf("go list -m github.com/nats-io/nats-server/v2: %v (cannot tell which nats-server kusaw links)", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "kusaw-e2e", "nats-server-"+ver+"-"+runtime.GOOS+"-"+runtime.GOARCH)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, "github.com/nats-io/nats-server/v2")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building nats-server %s from the module cache (the Go module proxy must be reachable once): %v\n%s", ver, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("built nats-server %s into %s", ver, bin)
	return bin
}

// natsProc is one nats-server process from a written configuration.
type natsProc struct {
	bin, conf, name string
	monitor         int
	cmd             *exec.Cmd
	log             *syncBuffer
}

func (n *natsProc) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(n.bin, "-c", n.conf)
	n.log = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = n.log, n.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd = cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("nats-server %s:\n%s", n.name, lastLines(n.log.String(), 8))
		}
	})
}

// stop stops the server as a service manager does (SIGTERM).
func (n *natsProc) stop(t *testing.T) {
	t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	_ = n.cmd.Wait()
}

// kill9 kills the server at once (no shutdown, no leadership handed on).
func (n *natsProc) kill9(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.cmd.Wait()
}

func (n *natsProc) get(path string, out any) error {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", n.monitor, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s %s", path, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// startNATSServers starts nats-server -c natsN.conf from what kusaw
// cluster nats-config wrote in ncDir, one per port (its monitor 4000
// above), and waits until all are healthy.
func startNATSServers(t *testing.T, bin, ncDir string, ports []int) []*natsProc {
	t.Helper()
	var ns []*natsProc
	for i, p := range ports {
		n := &natsProc{bin: bin, conf: filepath.Join(ncDir, fmt.Sprintf("nats%d.conf", i+1)), name: fmt.Sprintf("nats%d", i+1), monitor: p + 4000}
		n.start(t)
		ns = append(ns, n)
	}
	waitHealthy(t, ns)
	return ns
}

// waitHealthy waits until every server's /healthz says it is ready
// (JetStream current with the cluster).
func waitHealthy(t *testing.T, ns []*natsProc) {
	t.Helper()
	for _, n := range ns {
		waitFor(t, "nats-server "+n.name+" to be healthy", 60*time.Second, func() bool { return n.get("/healthz", nil) == nil })
	}
}

// streamLeader is the server name leading stream in account acc, as
// the monitoring endpoint of a live server reports it.
func streamLeader(t *testing.T, ns []*natsProc, acc, stream string) string {
	t.Helper()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name    string `json:"name"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	for _, n := range ns {
		if err := n.get("/jsz?streams=true&acc="+acc, &jsz); err != nil {
			continue
		}
		for _, a := range jsz.Accounts {
			for _, s := range a.Streams {
				if s.Name == stream && s.Cluster.Leader != "" {
					return s.Cluster.Leader
				}
			}
		}
	}
	t.Fatalf("no server reports a leader of %s", stream)
	return ""
}

// metricValue is the value of an unlabelled metric in a /metrics answer
// ("" when it is not there).
func metricValue(m, name string) string {
	for _, l := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// waitUp waits until worker name sends heartbeats again after since,
// neither lost, draining nor stopped.
func (r *clusterRig) waitUp(t *testing.T, name string, since time.Time) {
	t.Helper()
	waitFor(t, "worker "+name+" to be up", 60*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		for _, w := range ws {
			if w.Name == name && w.LastHeartbeat != nil && w.LastHeartbeat.After(since) && !w.Lost && !w.Draining && !w.Stopped {
				return true
			}
		}
		return false
	})
}

// submitSleep submits n runs whose first step sleeps secs.
func (r *clusterRig) submitSleep(t *testing.T, n int, secs string) []string {
	t.Helper()
	var ids []string
	for range n {
		rec, err := r.sp.client.Submit(context.Background(), "", map[string]string{"SLEEP": secs})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	return ids
}

// runningOn waits until the workers run at least n attempts and returns
// one worker running one (the first named in ws order).
func (r *clusterRig) runningOn(t *testing.T, n int) string {
	t.Helper()
	var busy string
	waitFor(t, fmt.Sprintf("%d attempts running on the workers", n), 60*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		total := 0
		busy = ""
		for _, w := range ws {
			total += w.Running
			if w.Running > 0 && busy == "" && !w.Draining && !w.Stopped {
				busy = w.Name
			}
		}
		return total >= n && busy != ""
	})
	return busy
}

// idle waits until no worker runs anything (what a fault before left
// running has ended), so the next fault starts on a quiet cluster.
func (r *clusterRig) idle(t *testing.T) {
	t.Helper()
	waitFor(t, "the workers to be idle", 2*time.Minute, func() bool {
		ws, err := r.sp.client.Workers(context.Background())
		if err != nil {
			return false
		}
		for _, w := range ws {
			if w.Running > 0 {
				return false
			}
		}
		return true
	})
}

// noneRerun: each run has exactly its two attempts, both passed (nothing
// lost, nothing run again).
func (r *clusterRig) noneRerun(t *testing.T, ids []string, what string) {
	t.Helper()
	for _, id := range ids {
		d := waitDetail(t, r.sp.client, id, time.Second)
		if len(d.Attempts) != 2 {
			t.Errorf("%s: run %s has %d attempts, want 2 (none run again)", what, id, len(d.Attempts))
		}
		for _, a := range d.Attempts {
			if a.Outcome != status.OutcomePassed {
				t.Errorf("%s: run %s attempt %s/%d on %s: %s (%s)", what, id, a.Step, a.Number, a.Worker, a.Outcome, a.Message)
			}
		}
	}
}

func (r *clusterRig) metrics(t *testing.T) string {
	t.Helper()
	var info client.ServeInfo
	b, err := os.ReadFile(filepath.Join(r.dir, ".kusaw", record.ServeInfoFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Listen == "" {
		t.Fatalf("serve.json names no listener: %v %s", err, b)
	}
	req, _ := http.NewRequest("GET", "http://"+info.Listen+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+clusterAPIToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func TestClusterExternalProcesses(t *testing.T) {
	t.Parallel() // one of the package's longest: beside the others of them (make test's 15 minutes)
	need(t, "git")
	top := t // processes started again in a subtest live until the test ends
	bin := natsServerBin(t)
	sandbox := clusterSandbox(t)
	work := t.TempDir()
	ncDir := filepath.Join(work, "nats")

	// 1. kusaw cluster nats-config, as the docs say.
	args := []string{"cluster", "nats-config", "--dir", ncDir}
	ports := natstest.PortTriples(t, 3)
	for _, p := range ports {
		args = append(args, "--server", fmt.Sprintf("127.0.0.1:%d", p))
	}
	nc := runKusaw(t, work, args...)
	if nc.code != 0 || !strings.Contains(nc.stdout, "nats-server -c "+filepath.Join(ncDir, "nats1.conf")) {
		t.Fatalf("kusaw cluster nats-config: exit %d\n%s%s", nc.code, nc.stdout, nc.stderr)
	}
	// 2. nats-server -c natsN.conf on each.
	ns := startNATSServers(t, bin, ncDir, ports)

	// 3. The printed serve.cluster block into the factory file, the
	// signing key into serve's secret store with kusaw config set.
	block := readFile(t, filepath.Join(ncDir, "serve-cluster.yaml"))
	i := strings.Index(block, "  cluster:\n")
	if i < 0 {
		t.Fatalf("serve-cluster.yaml has no cluster block:\n%s", block)
	}
	account := ""
	for _, l := range strings.Split(block, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "account: "); ok {
			account = v
		}
	}
	// lost_after 30s: a kill -9 of a stream leader holds heartbeats up
	// for NATS's election, about 10s on an idle machine and more on a
	// loaded one (make test on 2 cores); a worker heard of no longer
	// than that would be found lost for NATS's moment.
	yaml := clusterYAML(sandbox, `"${KUSAW_PARAM_SLEEP:-0.3}"`, "30s")
	yaml = strings.Replace(yaml, "max_parallel: 12\n", "max_parallel: 12\n  listen: 127.0.0.1:0\n", 1)
	yaml = strings.Replace(yaml, `  cluster: {listen: "127.0.0.1:0", local_worker: false, lost_after: 30s}`+"\n",
		block[i:]+"    local_worker: false\n    lost_after: 30s\n", 1)
	if !strings.Contains(yaml, "nats_url: tls://127.0.0.1:") || account == "" {
		t.Fatalf("the factory does not take the printed block:\n%s", yaml)
	}
	dir := factoryDir(t, yaml, "app")
	st := secretstore.OpenDir(filepath.Join(dir, "secrets"))
	if err := st.Set("cluster.token", clusterSecret); err != nil {
		t.Fatal(err)
	}
	if err := st.Set(serve.TokenSecretKey, clusterAPIToken); err != nil {
		t.Fatal(err)
	}
	revokeSeeds := map[string]string{}
	for key, file := range map[string]string{"serve.cluster.signing_key": "kusaw-signing.nk", "serve.cluster.system_key": "sys-revoke.nk", "serve.cluster.operator_key": "operator-signing.nk"} {
		b, err := os.ReadFile(filepath.Join(ncDir, file))
		if err != nil {
			t.Fatal(err)
		}
		revokeSeeds[key] = strings.TrimSpace(string(b))
		set := exec.Command(kusawBin, "config", "set", key, "--secret")
		set.Dir, set.Env, set.Stdin = dir, testEnv(t, dir), bytes.NewReader(b)
		if out, err := set.CombinedOutput(); err != nil {
			t.Fatalf("kusaw config set %s --secret: %v\n%s", key, err, out)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The operator's mistakes first: a CA that is not the servers', and
	// a URL with a host their certificates do not name. serve stops at
	// start with one line naming the key to set.
	otherCA := filepath.Join(work, "other")
	if res := runKusaw(t, work, "cluster", "nats-config", "--dir", otherCA, "--server", "127.0.0.1:1"); res.code != 0 {
		t.Fatalf("nats-config for another CA: %d %s", res.code, res.stderr)
	}
	for _, bad := range []struct{ name, from, to, want string }{
		{"wrong CA", filepath.Join(ncDir, "ca.pem"), filepath.Join(otherCA, "ca.pem"), "set serve.cluster.ca to the PEM file of the CA that signed it"},
		// every URL: with one good one left serve connects to that
		{"wrong host", "tls://127.0.0.1:", "tls://localhost:", "does not name the host as serve.cluster.nats_url writes it"},
	} {
		bd := factoryDir(t, strings.ReplaceAll(yaml, bad.from, bad.to), "app")
		bst := secretstore.OpenDir(filepath.Join(bd, "secrets"))
		for key, v := range revokeSeeds {
			if err := bst.Set(key, v); err != nil {
				t.Fatal(err)
			}
		}
		if err := bst.Set(serve.TokenSecretKey, clusterAPIToken); err != nil {
			t.Fatal(err)
		}
		res := runKusawTimeout(t, bd, 30*time.Second, "serve")
		if res.code != int(status.ExitServeUnavailable) || !strings.Contains(res.stderr, bad.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("serve with a %s: exit %d, want %d and one line saying %q:\n%s", bad.name, res.code, status.ExitServeUnavailable, bad.want, res.stderr)
		}
	}
	r := &clusterRig{dir: dir, sp: startServe(t, dir)}
	if res := runKusaw(t, dir, "validate"); res.code != 0 {
		t.Fatalf("kusaw validate: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	workers := map[string]*workerProc{}
	names := []string{"x1", "x2", "x3"}
	for _, name := range names {
		workers[name] = r.startWorker(t, name)
	}
	r.waitWorkers(t, 3)
	defer func() {
		if t.Failed() {
			t.Logf("serve:\n%s", lastLines(r.sp.stderr.String(), 60))
		}
	}()

	// Each fault leaves the cluster as the next one needs it: after a
	// failure the rest would only report that one again.
	ok := t.Run("runs", func(t *testing.T) {
		ids := r.submit(t, 12)
		per := r.checkRuns(t, ids)
		if len(per) != 3 {
			t.Errorf("attempts by worker %v: want all three workers used", per)
		}
		m := r.metrics(t)
		for _, want := range []string{"kusaw_cluster_connected 1", `kusaw_cluster_workers{state="up"} 3`, `kusaw_cluster_workers{state="lost"} 0`} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %q:\n%s", want, m)
			}
		}
	})

	ok = ok && t.Run("stream_leader_killed", func(t *testing.T) {
		r.idle(t)
		ids := r.submitSleep(t, 4, "2")
		r.runningOn(t, 3)
		leader := streamLeader(t, ns, account, "KUSAW_EVENTS")
		var victim *natsProc
		for _, n := range ns {
			if n.name == leader {
				victim = n
			}
		}
		if victim == nil {
			t.Fatalf("the leader %q is none of the servers", leader)
		}
		t.Logf("kill -9 of %s, leader of KUSAW_EVENTS", leader)
		victim.kill9(t)
		r.checkRuns(t, ids)
		victim.start(top) // the test's, not the subtest's: it outlives this fault
		waitHealthy(t, ns)
		if l := streamLeader(t, ns, account, "KUSAW_EVENTS"); l == "" {
			t.Error("no leader after the restart")
		}
	})

	ok = ok && t.Run("all_servers_down", func(t *testing.T) {
		r.idle(t)
		lostBefore := metricValue(r.metrics(t), "kusaw_cluster_lost_attempts_total")
		ids := r.submitSleep(t, 3, "4")
		r.runningOn(t, 3)
		// Stopped (SIGTERM), as an outage of the machines or their
		// network looks to kusaw: a kill -9 of every server at once can
		// also lose what NATS had acknowledged and not yet written.
		for _, n := range ns {
			n.stop(t)
		}
		waitFor(t, "health to report the lost connection", 30*time.Second, func() bool {
			h, err := r.sp.client.Health(context.Background())
			return err == nil && h.Cluster != nil && !h.Cluster.Connected && !h.OK
		})
		if m := r.metrics(t); !strings.Contains(m, "kusaw_cluster_connected 0") {
			t.Errorf("/metrics while NATS is down:\n%s", m)
		}
		// Down for longer than lost_after (30s): the workers' attempts
		// end meanwhile and the workers keep their results.
		time.Sleep(32 * time.Second)
		ws, err := r.sp.client.Workers(context.Background())
		for _, w := range ws {
			if w.Lost {
				t.Errorf("worker %s is lost while serve cannot reach NATS (%v)", w.Name, err)
			}
		}
		for _, n := range ns {
			n.start(top)
		}
		waitHealthy(t, ns)
		r.checkRuns(t, ids)
		r.noneRerun(t, ids, "after the outage")
		if m := r.metrics(t); !strings.Contains(m, "kusaw_cluster_connected 1") || metricValue(m, "kusaw_cluster_lost_attempts_total") != lostBefore {
			t.Errorf("/metrics after the outage:\n%s", m)
		}
	})

	ok = ok && t.Run("worker_sigterm", func(t *testing.T) {
		r.idle(t)
		ids := r.submitSleep(t, 2, "2")
		name := r.runningOn(t, 2)
		w := workers[name]
		if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := w.waitExit(t, time.Minute); code != 0 {
			t.Fatalf("worker %s after SIGTERM: exit %d\n%s", name, code, w.log.String())
		}
		r.checkRuns(t, ids)
		r.noneRerun(t, ids, "SIGTERM of "+name)
		since := time.Now()
		w.start(top) // from its folder, without a token
		r.waitUp(t, name, since)
	})

	ok = ok && t.Run("workers_drain", func(t *testing.T) {
		r.idle(t)
		ids := r.submitSleep(t, 2, "2")
		name := r.runningOn(t, 2)
		if res := runKusaw(t, dir, "workers", "drain", name); res.code != 0 {
			t.Fatalf("kusaw workers drain %s: %d %s%s", name, res.code, res.stdout, res.stderr)
		}
		w := workers[name]
		if code := w.waitExit(t, time.Minute); code != 0 {
			t.Fatalf("worker %s after kusaw workers drain: exit %d\n%s", name, code, w.log.String())
		}
		r.checkRuns(t, ids)
		r.noneRerun(t, ids, "drain of "+name)
		since := time.Now()
		w.start(top)
		r.waitUp(t, name, since)
	})

	ok = ok && t.Run("rolling_restart", func(t *testing.T) {
		r.idle(t)
		ids := r.submitSleep(t, 9, "2")
		r.runningOn(t, 4)
		for _, name := range names {
			w := workers[name]
			ws, _ := r.sp.client.Workers(context.Background())
			for _, x := range ws {
				if x.Name == name {
					t.Logf("SIGTERM to %s while it runs %d attempts", name, x.Running)
				}
			}
			if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := w.waitExit(t, time.Minute); code != 0 {
				t.Fatalf("worker %s after SIGTERM: exit %d\n%s", name, code, w.log.String())
			}
			since := time.Now()
			w.start(top)
			r.waitUp(t, name, since)
		}
		r.checkRuns(t, ids)
		r.noneRerun(t, ids, "the rolling restart")
	})
	// kusaw workers retire revokes the worker's user key on the account:
	// the NATS servers close its connection and refuse it (it exits 10,
	// not_enrolled), which serve alone could not make them do.
	ok = ok && t.Run("retire", func(t *testing.T) {
		r.idle(t)
		held, note, err := r.sp.client.RetireWorker(context.Background(), "x3")
		if err != nil || note != "" {
			t.Fatalf("kusaw workers retire x3: %v (note %q, %d held)", err, note, held)
		}
		if code := workers["x3"].waitExit(t, time.Minute); code != int(status.ExitNotEnrolled) {
			t.Fatalf("the retired worker x3: exit %d, want %d (not_enrolled)\n%s", code, status.ExitNotEnrolled, workers["x3"].log.String())
		}
		ids := r.submitSleep(t, 2, "0.3")
		r.checkRuns(t, ids)
	})
	if !ok {
		t.Log("a fault failed: the ones after it did not run")
	}
}
