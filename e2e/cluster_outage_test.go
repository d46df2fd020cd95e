package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/natstest"
	"github.com/kusaw/kusaw/status"
)

// The NATS server goes away for longer than lost_after while a worker
// runs two attempts (serve on an existing NATS server: the embedded one
// cannot go without serve). Serve logs the disconnect, /v1/health and
// kusaw service status say so; no worker is found lost for it, and when
// NATS is back the worker's results, kept meanwhile, are taken: every run
// succeeds with no attempt lost and none run again.
func TestClusterNATSOutage(t *testing.T) {
	need(t, "git")
	c := natstest.StartCluster(t, t.TempDir(), 1)
	yaml := strings.Replace(clusterYAML(clusterSandbox(t), "3", "3s"), `cluster: {listen: "127.0.0.1:0", local_worker: false, lost_after: 3s}`,
		`cluster: {nats_url: "`+c.URL+`", account: `+c.Account+`, signing_key: {secret: `+natsSigningKey+`}, ca: "`+c.CAFile+`", local_worker: false, lost_after: 3s}`, 1)
	if !strings.Contains(yaml, "nats_url") {
		t.Fatal("the factory does not use nats_url")
	}
	r := startClusterServeSecrets(t, yaml, map[string]string{natsSigningKey: c.SigningSeed})
	r.startWorker(t, "steady")
	r.waitWorkers(t, 1)
	ids := r.submit(t, 2)
	r.waitRunning(t, "steady", 2)

	c.Stop()
	waitFor(t, "health to report the lost connection", 20*time.Second, func() bool {
		h, err := r.sp.client.Health(context.Background())
		return err == nil && h.Cluster != nil && !h.Cluster.Connected && !h.OK
	})
	st := runKusaw(t, r.dir, "service", "status")
	if st.code != int(status.ExitServeUnavailable) || !strings.Contains(st.stdout, "NOT connected to NATS") {
		t.Errorf("kusaw service status while NATS is down: exit %d\n%s", st.code, st.stdout)
	}
	// Down for well past lost_after (3s): the worker's attempts end
	// meanwhile and it keeps their results.
	time.Sleep(10 * time.Second)
	ws, err := r.sp.client.Workers(context.Background())
	if err != nil || len(ws) != 1 || ws[0].Lost {
		t.Errorf("while serve cannot reach NATS, kusaw workers: %v %+v", err, ws)
	}
	c.Restart(t)
	r.checkRuns(t, ids)
	for _, id := range ids {
		d := waitDetail(t, r.sp.client, id, time.Second)
		if len(d.Attempts) != 2 {
			t.Errorf("run %s: %d attempts, want 2 (none run again)", id, len(d.Attempts))
		}
		for _, a := range d.Attempts {
			if a.Outcome != status.OutcomePassed || a.Worker != "steady" {
				t.Errorf("run %s attempt %s/%d: %s on %s (%s)", id, a.Step, a.Number, a.Outcome, a.Worker, a.Message)
			}
		}
	}
	h, err := r.sp.client.Health(context.Background())
	if err != nil || !h.OK || h.Cluster == nil || !h.Cluster.Connected || h.Cluster.Disconnects < 1 {
		t.Errorf("health after NATS is back: %v %+v", err, h.Cluster)
	}
	log := r.sp.stderr.String()
	for _, want := range []string{"disconnected from the NATS server", "reconnected to the NATS server"} {
		if !strings.Contains(log, want) {
			t.Errorf("serve's log lacks %q:\n%s", want, log)
		}
	}
}
