package dispatch

import (
	"context"
	"time"

	"github.com/kusaw/kusaw/cluster"
)

// dropWork deletes an attempt's work message (its sequence in the work
// stream) when serve stops waiting for the attempt, however it ended: a
// worker keeps the message in progress while it runs the attempt, so a
// lost worker's message would otherwise be offered again after its ack
// wait and run under its old number beside the attempt serve dispatched
// anew. Gone already (its worker acknowledged it) is fine.
func (d *Dispatcher) dropWork(ctx context.Context, seq uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if st, err := d.o.H.JS.Stream(ctx, cluster.WorkStream); err == nil {
		_ = st.DeleteMsg(ctx, seq)
	}
}
