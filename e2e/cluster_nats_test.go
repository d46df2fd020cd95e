package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/internal/natstest"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// serve on an existing NATS cluster (docs/cluster.md, "An existing NATS
// cluster"): the test process runs a nats-server in operator mode with
// JetStream and TLS on loopback, as a team's own cluster would be; serve
// connects to it with serve.cluster.nats_url and signs credentials with
// the account's signing key from its secret store. Nothing of kusaw runs
// inside that server: it alone decides who may connect and what they may
// publish, from the JWTs.

const natsSigningKey = "nats.signing"

func natsClusterYAML(c *natstest.Cluster, sandbox string) string {
	return strings.Replace(clusterYAML(sandbox, "0.3", "15s"), `cluster: {listen: "127.0.0.1:0", local_worker: false, lost_after: 15s}`,
		`cluster: {nats_url: "`+c.URL+`", account: `+c.Account+`, signing_key: {secret: `+natsSigningKey+`}, ca: "`+c.CAFile+`",
    replicas: `+fmt.Sprint(len(c.Servers))+`, local_worker: false, lost_after: 15s}`, 1)
}

// Two workers join an existing cluster of three NATS servers (replicas:
// 3) with tokens and run the two-step sandboxed pipeline; each holds a JWT
// with its own permissions; the signing seed and the step's secret are in
// clear nowhere.
func TestClusterExternalNATS(t *testing.T) {
	need(t, "git")
	c := natstest.StartCluster(t, t.TempDir(), 3)
	yaml := natsClusterYAML(c, clusterSandbox(t))
	if !strings.Contains(yaml, "nats_url") {
		t.Fatal("the factory does not use nats_url")
	}
	r := startClusterServeSecrets(t, yaml, map[string]string{natsSigningKey: c.SigningSeed})
	if res := runKusaw(t, r.dir, "validate"); res.code != 0 {
		t.Fatalf("kusaw validate: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	// The token names the cluster, carries its CA and a bearer JWT, never
	// the signing seed.
	tokRes := runKusaw(t, r.dir, "cluster", "token")
	tok, err := cluster.ParseToken(tokRes.stdout)
	if err != nil {
		t.Fatalf("kusaw cluster token: %v (%s)", err, tokRes.stderr)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(tokRes.stdout), cluster.TokenPrefix))
	if tok.URLs != c.URL || tok.CAPEM != string(c.CAPEM) || tok.JWT == "" || strings.Contains(string(raw), c.SigningSeed) {
		t.Fatalf("token: urls %q, ca bundle %v, jwt %v, seed inside %v", tok.URLs, tok.CAPEM == string(c.CAPEM), tok.JWT != "", strings.Contains(string(raw), c.SigningSeed))
	}
	w1 := r.startWorker(t, "n1")
	w2 := r.startWorker(t, "n2")
	r.waitWorkers(t, 2)
	ids := r.submit(t, 6)
	per := r.checkRuns(t, ids)
	if len(per) != 2 {
		t.Errorf("attempts by worker %v: want both workers used", per)
	}
	// Each worker keeps a JWT for its own nkey, publishing under its own
	// name only.
	for _, w := range []*workerProc{w1, w2} {
		id, err := cluster.LoadIdentity(filepath.Join(w.state, "w"))
		if err != nil {
			t.Fatal(err)
		}
		uc, err := jwt.DecodeUserClaims(id.JWT)
		if err != nil {
			t.Fatalf("worker %s's JWT: %v", w.name, err)
		}
		if uc.Subject != id.NKey() || uc.IssuerAccount != c.Account || uc.BearerToken ||
			!uc.Pub.Allow.Contains(cluster.EventsSubject("*", w.name)) || uc.Pub.Allow.Contains(cluster.EventsSubject("*", "*")) {
			t.Errorf("worker %s's JWT: sub %s account %s bearer %v pub %v", w.name, uc.Subject, uc.IssuerAccount, uc.BearerToken, uc.Pub.Allow)
		}
	}
	// The secrets are in clear nowhere: serve's records, the cluster's
	// JetStream store, the workers' folders; the signing seed neither.
	roots := []string{filepath.Join(r.dir, ".kusaw"), filepath.Dir(c.CAFile), w1.state, w2.state}
	files := 0
	for _, root := range roots {
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				files++
				b, _ := os.ReadFile(p)
				if strings.Contains(string(b), clusterSecret) {
					t.Errorf("the step's secret is in clear in %s", p)
				}
				if strings.Contains(string(b), c.SigningSeed) {
					t.Errorf("the account's signing seed is in %s", p)
				}
			}
			return nil
		})
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(c.CAFile), "jetstream")); err != nil || files < 10 {
		t.Errorf("the cluster's JetStream store is not where the grep looked (%v, %d files)", err, files)
	}
	if res := runKusaw(t, r.dir, "log", "verify", "--strict", filepath.Join(r.dir, ".kusaw", "runs", ids[0], "events.jsonl")); res.code != 0 {
		t.Errorf("log verify: %d %s%s", res.code, res.stdout, res.stderr)
	}
}

// On an existing cluster, the cluster's server itself refuses a worker
// whose JWT is copied to another key or signed by a key the account does
// not know, and a join token works once.
func TestClusterExternalNATSRefuses(t *testing.T) {
	need(t, "git")
	c := natstest.Start(t, t.TempDir())
	r := startClusterServeSecrets(t, natsClusterYAML(c, `"off"`), map[string]string{natsSigningKey: c.SigningSeed})
	good := r.startWorker(t, "good")
	r.waitWorkers(t, 1)
	state := t.TempDir()
	b, err := os.ReadFile(filepath.Join(good.state, "w", "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	forge := func(name string, edit func(id map[string]any, other *cluster.Identity)) string {
		var id map[string]any
		if err := json.Unmarshal(b, &id); err != nil || id["jwt"] == nil {
			t.Fatalf("the good worker's identity has no JWT: %v %s", err, b)
		}
		other, _ := cluster.NewIdentity("good")
		id["user_seed"], id["curve_seed"] = other.UserSeed, other.CurveSeed
		edit(id, other)
		dir := filepath.Join(state, name)
		os.MkdirAll(dir, 0o700)
		out, _ := json.Marshal(id)
		os.WriteFile(filepath.Join(dir, "identity.json"), out, 0o600)
		return dir
	}
	// The good worker's JWT with the forger's own keys.
	copied := forge("copied", func(map[string]any, *cluster.Identity) {})
	// A JWT for the forger's key, claiming the account but signed by an
	// account key of the forger's own.
	signed := forge("signed", func(id map[string]any, other *cluster.Identity) {
		kp, _ := nkeys.CreateAccount()
		uc := jwt.NewUserClaims(other.NKey())
		uc.IssuerAccount = c.Account
		id["jwt"], _ = uc.Encode(kp)
	})
	for _, dir := range []string{copied, signed} {
		res := runKusaw(t, state, "worker", "--state-dir", dir)
		if res.code != int(status.ExitNotEnrolled) {
			t.Fatalf("a forged identity in %s: exit %d %s", filepath.Base(dir), res.code, res.stderr)
		}
	}
	// The legitimate twin: the good worker's own identity connects (it is
	// running), and a copy of it starts too.
	twin := filepath.Join(state, "twin")
	os.MkdirAll(twin, 0o700)
	os.WriteFile(filepath.Join(twin, "identity.json"), b, 0o600)
	if res := runKusawTimeout(t, state, 3*time.Second, "worker", "--state-dir", twin); !strings.Contains(res.stderr, "ready") {
		t.Fatalf("the good worker's own identity: exit %d %s", res.code, res.stderr)
	}
	// A token works once.
	tok := strings.TrimSpace(runKusaw(t, r.dir, "cluster", "token").stdout)
	first := runKusawTimeout(t, state, 3*time.Second, "worker", "--state-dir", filepath.Join(state, "a"), "--name", "a", "--join", tok)
	if !strings.Contains(first.stderr, "enrolled") {
		t.Fatalf("first use of a token: %d %s", first.code, first.stderr)
	}
	second := runKusaw(t, state, "worker", "--state-dir", filepath.Join(state, "b"), "--name", "b", "--join", tok)
	if second.code != int(status.ExitNotEnrolled) || !strings.Contains(second.stderr, "used already") {
		t.Fatalf("a token used twice: exit %d %s", second.code, second.stderr)
	}
}

// serve with nats_url but without the signing seed in its store, or with a
// seed the account does not list, stops at start with one line naming the
// fix.
func TestClusterExternalNATSBadKeys(t *testing.T) {
	need(t, "git")
	c := natstest.Start(t, t.TempDir())
	other, _ := nkeys.CreateAccount()
	otherSeed, _ := other.Seed()
	for _, tc := range []struct {
		name, seed, want string
	}{
		{"missing", "", "kusaw config set " + natsSigningKey + " --secret"},
		{"unknown", string(otherSeed), "is signing_key a signing key of account " + c.Account},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := factoryDir(t, natsClusterYAML(c, `"off"`), "app")
			if tc.seed != "" {
				if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set(natsSigningKey, tc.seed); err != nil {
					t.Fatal(err)
				}
			}
			res := runKusawTimeout(t, dir, 20*time.Second, "serve")
			if res.code != int(status.ExitServeUnavailable) || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
				t.Fatalf("exit %d, stderr:\n%s", res.code, res.stderr)
			}
			if tc.seed != "" && strings.Contains(res.stderr, tc.seed) {
				t.Fatal("the seed is in serve's error")
			}
		})
	}
}

// One of the three NATS servers goes away while attempts run on the
// workers: serve and the workers move to the others, the streams and
// buckets (replicas: 3) lose nothing, and every run succeeds.
func TestClusterExternalNATSServerLost(t *testing.T) {
	need(t, "git")
	c := natstest.StartCluster(t, t.TempDir(), 3)
	yaml := strings.Replace(natsClusterYAML(c, clusterSandbox(t)), "sleep 0.3", "sleep 2", 1)
	r := startClusterServeSecrets(t, yaml, map[string]string{natsSigningKey: c.SigningSeed})
	r.startWorker(t, "h1")
	r.startWorker(t, "h2")
	r.waitWorkers(t, 2)
	ids := r.submit(t, 4)
	waitFor(t, "attempts running on the workers", 30*time.Second, func() bool {
		ws, _ := r.sp.client.Workers(context.Background())
		n := 0
		for _, w := range ws {
			n += w.Running
		}
		return n >= 3
	})
	// The server serve is connected to goes: the hardest case, serve's
	// own connection, watchers and requests move to another server.
	victim := -1
	for i, s := range c.Servers {
		cz, err := s.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ci := range cz.Conns {
			if ci.Name == "kusaw serve" {
				victim = i
			}
		}
	}
	if victim < 0 {
		t.Fatal("no server holds serve's connection")
	}
	c.Servers[victim].Shutdown()
	c.Servers[victim].WaitForShutdown()
	per := r.checkRuns(t, ids)
	if len(per) == 0 {
		t.Fatal("no attempt passed on a worker")
	}
}
