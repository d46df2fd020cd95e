package dispatch

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/record"
	"github.com/nats-io/nats.go"
)

// A restarted serve keeps the claims of attempts a resumed run re-attaches
// to and ends every other one: its worker is told to stop, its claim and
// objects go. Re-attaching to an attempt whose claim went ends it as lost
// at once.
func TestSettleAndReattach(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	srv, err := cluster.StartServer(cluster.ServerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := cluster.Setup(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]uint64{}
	for _, id := range []string{"r/s/1", "r/s/2"} {
		if tokens[id], err = h.Claim(ctx, "default", id, "w1"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.PutBytes(ctx, cluster.ObjectName("default", id, tokens[id], "stdout.log"), []byte("out")); err != nil {
			t.Fatal(err)
		}
	}
	canceled := make(chan string, 4)
	sub, err := nc.Subscribe(cluster.CancelSubject("*"), func(m *nats.Msg) { canceled <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	d, err := New(ctx, Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: dir, LostAfter: 5 * time.Second, AwaitSettle: true})
	if err != nil {
		t.Fatal(err)
	}
	d.Settle(ctx, []string{"r/s/1"})
	if c, tok, _ := h.Holder(ctx, "default", "r/s/1"); tok != tokens["r/s/1"] || c.Worker != "w1" {
		t.Errorf("the kept claim changed: %+v %d", c, tok)
	}
	if _, tok, _ := h.Holder(ctx, "default", "r/s/2"); tok != 0 {
		t.Error("the released claim survived Settle")
	}
	if _, err := h.GetBytes(ctx, cluster.ObjectName("default", "r/s/1", tokens["r/s/1"], "stdout.log")); err != nil {
		t.Errorf("the kept attempt's object went: %v", err)
	}
	if _, err := h.GetBytes(ctx, cluster.ObjectName("default", "r/s/2", tokens["r/s/2"], "stdout.log")); err == nil {
		t.Error("the released attempt's object survived Settle")
	}
	select {
	case s := <-canceled:
		if s != cluster.CancelSubject(cluster.Key("r/s/2")) {
			t.Errorf("cancel sent on %s", s)
		}
	case <-time.After(5 * time.Second):
		t.Error("the released attempt's worker was not told to stop")
	}

	job := record.RemoteJob{Dir: t.TempDir(), Emit: func(string, map[string]any) {}}
	res := d.Reattach(ctx, &record.AttemptSpec{ID: "r/s/2", Run: "r", Step: "s", Number: 2}, job, "w1", tokens["r/s/2"])
	if !res.Lost {
		t.Errorf("re-attaching to a released attempt: %+v, want lost", res)
	}
}
