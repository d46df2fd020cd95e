package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/record"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// take claims one work message and runs it.
func (w *Worker) take(ctx context.Context, msg jetstream.Msg) {
	var work cluster.Work
	if err := json.Unmarshal(msg.Data(), &work); err != nil {
		_ = msg.Term()
		return
	}
	spec, err := record.ParseSpec(work.Spec)
	if err != nil {
		w.refuse(ctx, msg, work.Spec, err)
		return
	}
	if w.Draining() || ctx.Err() != nil {
		_ = msg.Nak() // another worker takes it
		return
	}
	// A step starts here soon, in a cgroup (every step has kusaw's
	// default limits): the kernel's wait before its placement is taken
	// from now on, beside the claim and the git work.
	// It ends at the step's placement, or here when none comes.
	unwarm := proc.Prewarm(proc.Defaults(proc.Limits{}))
	defer unwarm()
	pool := cluster.PoolOfWork(msg.Subject())
	token, err := w.h.Claim(ctx, pool, spec.ID, w.id.Name)
	if err != nil {
		// Another worker holds it (a redelivery), or the bucket failed:
		// either way it is not ours.
		_ = msg.Term()
		return
	}
	defer w.holdWork(msg)()
	// Not ended with ctx: a stopping worker hands its attempts back
	// first (handBackAll), then cancels them.
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	a := &claimed{id: spec.ID, pool: pool, token: token, cancel: cancel}
	w.mu.Lock()
	w.running[spec.ID] = a
	w.mu.Unlock()
	if ctx.Err() != nil {
		w.handBack([]*claimed{a}, fmt.Sprintf("worker %s was stopped at once", w.id.Name))
	}
	defer func() {
		w.mu.Lock()
		delete(w.running, spec.ID)
		w.mu.Unlock()
		for k := range a.secrets {
			a.secrets[k] = ""
		}
	}()
	key := cluster.Key(spec.ID)
	sub, _ := w.nc.Subscribe(cluster.CancelSubject(key), func(*nats.Msg) { cancel() })
	if sub != nil {
		defer sub.Unsubscribe()
	}
	w.o.Logf("attempt %s: claimed (token %d)", spec.ID, token)
	res := w.run(actx, spec, &work, a)
	w.mu.Lock()
	back := a.handedBack
	a.reporting = !back
	w.mu.Unlock()
	if back {
		return // serve has it back: what it did here is not reported
	}
	res.Attempt, res.Worker, res.Token = spec.ID, w.id.Name, token
	b, _ := json.Marshal(res)
	// Serve ends the claim once it took the result, so whether it still
	// stands is asked before it is sent.
	c, cur, herr := w.h.Holder(context.Background(), pool, spec.ID)
	fenced := herr == nil && (cur != token || c.Worker != w.id.Name)
	// The message id makes a result sent again (serve was restarting) one
	// message in the stream.
	err = w.persist("attempt "+spec.ID+": report", func(pctx context.Context) error {
		_, err := w.h.JS.Publish(pctx, cluster.ResultSubject(key, w.id.Name), b, jetstream.WithMsgID(fmt.Sprintf("%s/%d", spec.ID, token)))
		return err
	})
	if err != nil {
		w.o.Logf("attempt %s: cannot report: %v", spec.ID, err)
		return
	}
	if fenced {
		w.o.Logf("attempt %s: reported (%s) but fenced: serve had ended this worker's claim (token %d; it found the worker lost, or the run ended), so it records the result and uses none of it", spec.ID, outcomeOf(res), token)
		return
	}
	w.o.Logf("attempt %s: reported (%s)", spec.ID, outcomeOf(res))
}

// refuse tells serve why this worker cannot run an attempt as asked (a
// spec of another kusaw version, or with a part it does not know): it
// claims the attempt and reports the reason, so the attempt fails saying
// so instead of waiting for a worker that never comes.
func (w *Worker) refuse(ctx context.Context, msg jetstream.Msg, raw []byte, why error) {
	w.o.Logf("refused an attempt: %v", why)
	defer func() { _ = msg.Term() }()
	var head struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &head) != nil || head.ID == "" {
		return
	}
	token, err := w.h.Claim(ctx, cluster.PoolOfWork(msg.Subject()), head.ID, w.id.Name)
	if err != nil {
		return // another worker holds it
	}
	res := cluster.Result{Attempt: head.ID, Worker: w.id.Name, Token: token, Error: "cannot run the attempt: " + why.Error()}
	b, _ := json.Marshal(res)
	_, err = w.h.JS.Publish(ctx, cluster.ResultSubject(cluster.Key(head.ID), w.id.Name), b, jetstream.WithMsgID(fmt.Sprintf("%s/%d", head.ID, token)))
	if err != nil {
		w.o.Logf("attempt %s: cannot report the refusal: %v", head.ID, err)
	}
}

func outcomeOf(r cluster.Result) string {
	if r.Error != "" {
		return "error: " + r.Error
	}
	var rec record.AttemptRecord
	_ = json.Unmarshal(r.Record, &rec)
	return string(rec.Outcome)
}

// run fetches the attempt's secrets and code, runs it through the engine
// and stores what it made.
func (w *Worker) run(ctx context.Context, spec *record.AttemptSpec, work *cluster.Work, a *claimed) cluster.Result {
	fail := func(format string, args ...any) cluster.Result {
		return cluster.Result{Error: fmt.Sprintf(format, args...)}
	}
	if len(spec.Secrets) > 0 {
		s, err := w.fetchSecrets(ctx, spec.ID, a.token)
		if err != nil {
			return fail("secrets: %v", err)
		}
		w.mu.Lock()
		a.secrets = s
		w.mu.Unlock()
	}
	tmp, err := os.MkdirTemp("", "kusaw-worker-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	repos := map[string]string{}
	base := map[string]string{}
	for _, r := range spec.Repos {
		base[r.Name] = r.Base
	}
	// Every commit the attempt reads, base commits first: a merge's or a
	// judge's candidates' bundles may build on them.
	for _, n := range spec.Needs() {
		path, err := w.cacheRepo(n.Repo)
		if err != nil {
			return fail("cache repo %s: %v", n.Repo, err)
		}
		repos[n.Repo] = path
		if holdsCommit(ctx, path, n.Commit) {
			w.holds(n.Repo, n.Commit)
			continue
		}
		// The bundle serve made against what the pool's workers hold; a
		// cache that lost a commit it needs gets a full one.
		obj, file := work.Object(n.Repo, n.Commit, base[n.Repo] == n.Commit), n.Repo+"-"+n.Commit+".bundle"
		err = errors.New("no bundle")
		if obj != "" {
			err = w.importBundle(ctx, path, obj, filepath.Join(tmp, "in-"+file), n.Commit)
		}
		if err != nil {
			if obj, err = w.fullBundle(ctx, spec.ID, a.token, n.Repo, n.Commit); err == nil {
				err = w.importBundle(ctx, path, obj, filepath.Join(tmp, "full-"+file), n.Commit)
			}
		}
		if err != nil {
			return fail("repo %s: %v", n.Repo, err)
		}
		w.holds(n.Repo, n.Commit)
	}
	w.enterRun(spec.Run)
	job, err := attempt.ForeignJob(spec, repos, w.runDir(spec.Run))
	if err != nil {
		w.leaveRun(spec.Run, "")
		return fail("%v", err)
	}
	host := *w.host
	host.Repos = repos
	rec := attempt.Run(ctx, &host, spec, job)
	dir := job.Dir
	// This attempt's folder only: other attempts of the same run (a
	// parallel group, a re-dispatch) may run here at once. The run's
	// folders go with its last attempt here.
	defer w.leaveRun(spec.Run, dir)
	res := cluster.Result{Heads: map[string]string{}, Bundles: map[string]string{}, Files: map[string]string{}, Digests: map[string]string{}}
	res.Record, _ = json.Marshal(rec)
	for _, wt := range rec.Worktrees {
		if wt.HeadSHA == "" {
			continue
		}
		res.Heads[wt.Repo] = wt.HeadSHA
		w.holds(wt.Repo, wt.HeadSHA)
		if wt.HeadSHA == wt.BaseSHA {
			continue
		}
		p := filepath.Join(tmp, "out-"+wt.Repo+".bundle")
		if _, err := cluster.MakeBundle(ctx, repos[wt.Repo], p, wt.HeadSHA, []string{wt.BaseSHA}); err != nil {
			return fail("repo %s: %v", wt.Repo, err)
		}
		name, sum, err := w.put("attempt "+spec.ID+": bundle", cluster.ObjectName(a.pool, spec.ID, a.token, "out-"+wt.Repo+".bundle"), p)
		if err != nil {
			return fail("repo %s: cannot store the bundle: %v", wt.Repo, err)
		}
		res.Bundles[wt.Repo], res.Digests[name] = name, sum
	}
	// Logs and artifacts go up at once: each object is a few round trips.
	uploads := map[string]string{} // object → local file
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(n, ".log") || n == record.EventsFile) {
			continue
		}
		obj := n
		if n == record.EventsFile {
			obj = cluster.WorkerEvents
		}
		uploads[obj] = filepath.Join(dir, n)
	}
	if arts := filepath.Join(dir, record.ArtifactsDir); hasFiles(arts) {
		p := filepath.Join(tmp, cluster.ArtifactsTar)
		f, err := os.Create(p)
		if err == nil {
			err = cluster.TarDir(arts, f)
			f.Close()
		}
		if err == nil {
			uploads[cluster.ArtifactsTar] = p
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var full error // a full object store fails the attempt: what it made would not all come back
	for obj, path := range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, sum, err := w.put("attempt "+spec.ID+": "+obj, cluster.ObjectName(a.pool, spec.ID, a.token, obj), path)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				res.Files[obj], res.Digests[name] = name, sum
			} else if errors.Is(err, cluster.ErrObjectsFull) {
				full = err
			}
		}()
	}
	wg.Wait()
	if full != nil {
		return fail("cannot store the attempt's results: %v", full)
	}
	return res
}

func hasFiles(dir string) bool {
	e, err := os.ReadDir(dir)
	return err == nil && len(e) > 0
}

// fetchSecrets asks serve for the attempt's secrets, sealed to this
// worker's curve key; they are opened here, in memory only.
func (w *Worker) fetchSecrets(ctx context.Context, id string, token uint64) (map[string]string, error) {
	b, _ := json.Marshal(cluster.SecretsRequest{Attempt: id, Worker: w.id.Name, Token: token})
	var m *nats.Msg
	err := w.connected(ctx, "attempt "+id+": secrets", func(c context.Context) (err error) {
		rctx, cancel := context.WithTimeout(c, 30*time.Second)
		defer cancel()
		m, err = w.nc.RequestWithContext(rctx, cluster.SecretsSubject(cluster.Key(id), w.id.Name), b)
		return err
	})
	if err != nil {
		return nil, err
	}
	var rep cluster.SecretsReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	plain, err := w.id.Open(rep.Sealed, w.id.ServeXKey)
	if err != nil {
		return nil, fmt.Errorf("cannot open what serve sealed: %v", err)
	}
	defer clear(plain)
	out := map[string]string{}
	return out, json.Unmarshal(plain, &out)
}

// cacheRepo is the worker's repository for a factory repo, made on first
// use; it holds every commit serve sent, so later bundles can be smaller.
func (w *Worker) cacheRepo(name string) (string, error) {
	if !cluster.ValidName(name) {
		return "", fmt.Errorf("repo name %q", name)
	}
	mu := w.lockRepo(name)
	defer mu.Unlock()
	p := filepath.Join(w.o.StateDir, cacheDir, name)
	if _, err := os.Stat(filepath.Join(p, ".git")); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", err
	}
	if out, err := exec.Command("git", "init", "-q", p).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git init: %v %s", err, out)
	}
	return p, nil
}

func (w *Worker) lockRepo(name string) *sync.Mutex {
	w.mu.Lock()
	mu := w.repoMu[name]
	if mu == nil {
		mu = &sync.Mutex{}
		w.repoMu[name] = mu
	}
	w.mu.Unlock()
	mu.Lock()
	return mu
}

// enterRun counts an attempt of run starting here.
func (w *Worker) enterRun(run string) {
	w.mu.Lock()
	w.runs[run]++
	w.mu.Unlock()
}

// leaveRun removes an attempt's folder and, when it was the run's last
// attempt here, the run's folder; a new attempt of the run waits for w.mu,
// so it never sees its folder go.
func (w *Worker) leaveRun(run, dir string) {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs[run]--; w.runs[run] > 0 {
		return
	}
	delete(w.runs, run)
	_ = os.RemoveAll(w.runDir(run))
}

// importBundle fetches object obj and imports it into the cache repo,
// checking it carries commit want.
func (w *Worker) importBundle(ctx context.Context, repo, obj, p, want string) error {
	// Not bounded by a time (a first bundle of a large repository on a
	// slow link takes what it takes): a fetch lost with the connection
	// starts again, and one that cannot is given up (connected).
	err := w.connected(ctx, "fetch "+obj, func(c context.Context) error {
		_, err := w.h.GetFile(c, obj, p)
		return err
	})
	if err != nil {
		return err
	}
	name := filepath.Base(repo)
	mu := w.lockRepo(name)
	tip, err := cluster.ImportBundle(ctx, repo, p)
	mu.Unlock()
	if err == nil && tip != want {
		err = fmt.Errorf("the bundle carries %s, not %s", tip, want)
	}
	return err
}

// fullBundle asks serve for a full bundle of a repo's commit (its base
// when commit is "").
func (w *Worker) fullBundle(ctx context.Context, id string, token uint64, repo, commit string) (string, error) {
	b, _ := json.Marshal(cluster.BundleRequest{Attempt: id, Worker: w.id.Name, Token: token, Repo: repo, Commit: commit})
	var m *nats.Msg
	err := w.connected(ctx, "attempt "+id+": full bundle", func(c context.Context) (err error) {
		rctx, cancel := context.WithTimeout(c, time.Minute)
		defer cancel()
		m, err = w.nc.RequestWithContext(rctx, cluster.BundleSubject(cluster.Key(id), w.id.Name), b)
		return err
	})
	if err != nil {
		return "", err
	}
	var rep cluster.BundleReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return "", err
	}
	if rep.Error != "" {
		return "", errors.New(rep.Error)
	}
	return rep.Object, nil
}

// maxHave bounds the commits a heartbeat names per repo.
const maxHave = 32

// holds notes a commit the cache holds, for the heartbeat.
func (w *Worker) holds(repo, sha string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := []string{sha}
	for _, c := range w.have[repo] {
		if c != sha && len(list) < maxHave {
			list = append(list, c)
		}
	}
	w.have[repo] = list
}
