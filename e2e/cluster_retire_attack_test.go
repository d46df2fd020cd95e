package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/natsconf"
	"github.com/kusaw/kusaw/internal/natstest"
)

// A retired worker on a kusaw cluster nats-config set-up, from the
// worker's side, against real nats-server processes: it keeps its
// identity (nkey seed and the JWT serve issued) and does not cooperate.
// Its connection that never dropped is closed by the servers, a new one
// with the old JWT is refused by every server: by one that was down when
// the worker was retired (once it is back), and by all of them after a
// restart of the whole cluster; and a second retirement, whose account
// JWT serve reads from a server that missed the first (rebuilt from its
// configuration, not yet in sync), does not undo the first: before serve
// revoked every retired key (RevokeRetired) it pushed the stale account
// plus the newest key only, and x3 got into all three servers again.
// Twin: a worker still enrolled stays connected throughout and connects
// again after each of these. The window a server that was down leaves
// (its resolver's interval) is logged.
func TestClusterRetiredWorkerShutOut(t *testing.T) {
	bin := natsServerBin(t)
	work := t.TempDir()
	ncDir := filepath.Join(work, "nats")
	args := []string{"cluster", "nats-config", "--dir", ncDir}
	ports := natstest.PortTriples(t, 3)
	var urls []string
	for _, p := range ports {
		args = append(args, "--server", fmt.Sprintf("127.0.0.1:%d", p))
		urls = append(urls, fmt.Sprintf("tls://127.0.0.1:%d", p))
	}
	if res := runKusaw(t, work, args...); res.code != 0 {
		t.Fatalf("kusaw cluster nats-config: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	ns := startNATSServers(t, bin, ncDir, ports)
	block := readFile(t, filepath.Join(ncDir, "serve-cluster.yaml"))
	field := func(name string) string {
		for _, l := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+": "); ok {
				return strings.Trim(v, `"`)
			}
		}
		t.Fatalf("serve-cluster.yaml has no %s:\n%s", name, block)
		return ""
	}
	seed := func(file string) string { return strings.TrimSpace(readFile(t, filepath.Join(ncDir, file))) }
	caPEM := []byte(readFile(t, filepath.Join(ncDir, "ca.pem")))
	x, err := cluster.OpenExternal(cluster.ExternalOptions{Dir: filepath.Join(work, "serve"), URLs: strings.Join(urls, ","), Account: field("account"),
		SigningSeed: seed(natsconf.SigningKeyFile), CAPEM: caPEM})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := cluster.NewRevoker(cluster.RevokerOptions{URLs: strings.Join(urls, ","), CAPEM: caPEM, Account: field("account"),
		SystemAccount: field("system_account"), SystemSeed: seed(natsconf.SystemKeyFile), OperatorSeed: seed(natsconf.OperatorKeyFile)})
	if err != nil {
		t.Fatal(err)
	}
	type worker struct {
		id  *cluster.Identity
		jwt string
	}
	enroll := func(name string) worker {
		id, err := cluster.NewIdentity(name)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := x.WorkerJWT(name, id.NKey(), cluster.Grant{Pools: []string{"default"}})
		if err != nil {
			t.Fatal(err)
		}
		if !x.Registry.Add(cluster.Enrolled{Name: name, NKey: id.NKey(), XKey: id.XKey(), Enrolled: time.Now()}) {
			t.Fatalf("enroll %s", name)
		}
		return worker{id, tok}
	}
	tc, err := cluster.ClusterTLS(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	// connect is the worker's connection as the attacker keeps it: it
	// reconnects by itself, for ever.
	connect := func(w worker, closed *atomic.Bool, to ...string) (*nats.Conn, error) {
		return nats.Connect(strings.Join(to, ","), nats.Secure(tc.Clone()), nats.Timeout(3*time.Second), nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond), nats.DontRandomize(), nats.CustomInboxPrefix(cluster.WorkerInbox(w.id.Name)),
			nats.UserJWT(func() (string, error) { return w.jwt, nil }, w.id.Sign),
			nats.ClosedHandler(func(*nats.Conn) {
				if closed != nil {
					closed.Store(true)
				}
			}))
	}
	// works: the connection reaches the account (a request answered by
	// the JetStream API of the account).
	works := func(nc *nats.Conn) bool {
		if nc == nil || !nc.IsConnected() {
			return false
		}
		_, err := nc.Request("$JS.API.INFO", nil, 3*time.Second)
		return err == nil
	}
	refused := func(w worker, what string, to ...string) {
		t.Helper()
		nc, err := connect(w, nil, to...)
		if err == nil {
			defer nc.Close()
			if works(nc) {
				t.Errorf("%s: the retired worker's old JWT connects to %v and reaches the account", what, to)
			}
		}
	}
	ret, twin := enroll("x3"), enroll("x2")
	var retClosed atomic.Bool
	cached, err := connect(ret, &retClosed, urls[0])
	if err != nil || !works(cached) {
		t.Fatalf("the worker before it was retired: %v", err)
	}
	twinConn, err := connect(twin, nil, urls...)
	if err != nil || !works(twinConn) {
		t.Fatalf("the twin: %v", err)
	}
	defer twinConn.Close()
	// A server is down when the worker is retired.
	ns[2].stop(t)
	// What kusaw workers retire does: retired in serve's registry, then
	// the registry's retired keys revoked on the account.
	x.Registry.Retire("x3")
	if err := rv.RevokeRetired(context.Background(), x.Registry); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	waitFor(t, "the servers to close the retired worker's connection", 20*time.Second, func() bool { return retClosed.Load() || !works(cached) })
	cached.Close()
	refused(ret, "after retire", urls[0])
	refused(ret, "after retire", urls[1])
	if !works(twinConn) {
		t.Fatal("the twin's connection was closed")
	}
	// The server that was down comes back: the attacker is at its door
	// the whole time, with a connection that reconnects by itself.
	ns[2].start(t)
	var backClosed atomic.Bool
	deadline := time.Now().Add(30 * time.Second)
	var back *nats.Conn
	var backAt time.Time
	for time.Now().Before(deadline) && back == nil {
		if nc, err := connect(ret, &backClosed, urls[2]); err == nil {
			back, backAt = nc, time.Now()
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitHealthy(t, ns)
	if back != nil {
		t.Logf("the retired worker got into the server that was down before it learnt of the revocation")
		// It got in before the server learnt of the revocation: the
		// server must shut it out once it does (its resolver's interval).
		ok := false
		for end := time.Now().Add(25 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			if backClosed.Load() || !works(back) {
				t.Logf("it was shut out %v after it got in", time.Since(backAt).Round(10*time.Millisecond))
				ok = true
				break
			}
		}
		back.Close()
		if !ok {
			t.Errorf("the server that was down when x3 was retired still serves its old JWT 25 s after it is back")
		}
	}
	refused(ret, "the server that was down", urls[2])
	// The whole cluster restarts (an upgrade).
	for _, n := range ns {
		n.stop(t)
	}
	for _, n := range ns {
		n.start(t)
	}
	waitHealthy(t, ns)
	for _, u := range urls {
		refused(ret, "after a restart of every server", u)
	}
	waitFor(t, "the twin to connect again", 30*time.Second, func() bool { return works(twinConn) })
	// A second worker is retired while a server that missed the first
	// retirement is back but not yet in sync, and serve's connection is
	// to that server (nats_url lists it; the client picks one at random):
	// the account JWT serve reads there lacks x3's revocation, and what
	// it pushes must not undo it.
	ns[2].stop(t)
	if err := os.RemoveAll(filepath.Join(ncDir, "jetstream", "nats3", "jwt")); err != nil {
		t.Fatal(err)
	}
	second := enroll("x4")
	ns[2].start(t)
	rv3, err := cluster.NewRevoker(cluster.RevokerOptions{URLs: urls[2], CAPEM: caPEM, Account: field("account"),
		SystemAccount: field("system_account"), SystemSeed: seed(natsconf.SystemKeyFile), OperatorSeed: seed(natsconf.OperatorKeyFile)})
	if err != nil {
		t.Fatal(err)
	}
	x.Registry.Retire("x4")
	var rerr error
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if rerr = rv3.RevokeRetired(context.Background(), x.Registry); rerr == nil {
			break
		}
	}
	if rerr != nil {
		t.Fatalf("revoke x4 through nats3: %v", rerr)
	}
	waitHealthy(t, ns)
	time.Sleep(12 * time.Second) // the full resolvers' interval: every server has the newest JWT
	for _, u := range urls {
		refused(ret, "after a second retirement read the account from a server that missed the first", u)
		refused(second, "the second retired worker", u)
	}
	fresh, err := connect(twin, nil, urls[2])
	if err != nil || !works(fresh) {
		t.Fatalf("the twin cannot connect to the server that was down: %v", err)
	}
	fresh.Close()
}
