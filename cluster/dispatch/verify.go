package dispatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
)

// fetchChecked fetches object obj of result r to path and checks its
// SHA-256 against the digest the result names for it: the result comes
// from the holder alone (its subject, its token), while any worker may
// write the object store. A missing digest is a mismatch. On any error
// path is removed.
func (d *Dispatcher) fetchChecked(ctx context.Context, r cluster.Result, obj, path string) (int64, error) {
	n, sum, err := d.o.H.GetFileSum(ctx, obj, path)
	if err == nil {
		err = digestMatches(r, obj, sum)
	}
	if err != nil {
		_ = os.Remove(path)
		return 0, err
	}
	return n, nil
}

// ownObject refuses an object outside the holder's for the attempt
// (<attempt>/<token>/): a result may name only what its sender stored for
// this attempt under its claim.
func ownObject(spec *record.AttemptSpec, r cluster.Result, obj string) error {
	if !strings.HasPrefix(obj, cluster.ObjectName(poolOf(spec), spec.ID, r.Token, "")) {
		return fmt.Errorf("object %s: worker %s named an object that is not its own for this attempt", obj, r.Worker)
	}
	return nil
}

// digestMatches compares an object's SHA-256 with the result's.
func digestMatches(r cluster.Result, obj, sum string) error {
	want, ok := r.Digests[obj]
	switch {
	case !ok || want == "":
		return fmt.Errorf("object %s: worker %s's result names no SHA-256 for it", obj, r.Worker)
	case want != sum:
		return fmt.Errorf("object %s: its SHA-256 %.12s is not the %.12s worker %s uploaded (it changed in the store since)", obj, sum, want, r.Worker)
	}
	return nil
}

// refusedSuffix marks a worker's egress log that did not verify: kept
// beside the attempt's files for a look, never as its egress.log.
const refusedSuffix = ".refused"

// takeEgress fetches a worker's egress.log and keeps it as the attempt's
// only when its digest matches the result's and it verifies against the
// key the worker enrolled; otherwise the attempt fails (egressVerdict).
func (d *Dispatcher) takeEgress(ctx context.Context, spec *record.AttemptSpec, job record.RemoteJob, r cluster.Result, obj string) error {
	dst := filepath.Join(job.Dir, record.EgressLogFile)
	err := ownObject(spec, r, obj)
	if err == nil {
		_, err = d.fetchChecked(ctx, r, obj, dst+".part")
	}
	if err == nil {
		if err = d.verifyEgress(dst+".part", r.Worker, spec); err != nil {
			_ = placeNew(dst+".part", dst+refusedSuffix)
		} else {
			err = placeNew(dst+".part", dst)
		}
	}
	data := map[string]any{"worker": r.Worker, "verified": err == nil}
	if err != nil {
		data["error"] = err.Error()
		err = fmt.Errorf("worker %s's egress.log was refused, so what the attempt reached on the network is unknown: %v", r.Worker, err)
	}
	job.Emit(record.EvClusterEgressLog, data)
	return err
}

// egressVerdict fails a result whose egress log was refused, or that
// carries none although the attempt ran behind the egress proxy (its
// sandbox required, its network allowlist or audit): a worker must not
// hide where an attempt connected.
func (d *Dispatcher) egressVerdict(spec *record.AttemptSpec, job record.RemoteJob, r cluster.Result, refused error) error {
	if refused != nil {
		return refused
	}
	if _, sent := r.Files[record.EgressLogFile]; sent || !Proxied(spec) {
		return nil
	}
	job.Emit(record.EvClusterEgressLog, map[string]any{"worker": r.Worker, "verified": false, "error": "missing"})
	return fmt.Errorf("worker %s sent no egress.log for an attempt whose network (%s) ran behind the egress proxy, so what it reached is unknown", r.Worker, spec.Network)
}

// Proxied reports whether an attempt runs behind the egress proxy, which
// logs every connection to its egress.log.
func Proxied(spec *record.AttemptSpec) bool {
	return spec.Mode == config.ModeRequired && spec.Network.Proxied()
}

// maxRefusedTypes bounds the event types refused from one attempt's
// worker that serve records (one event each): a worker that sends many
// cannot fill serve's record with refusals.
const maxRefusedTypes = 20

// fromWorker decides whether serve writes an event a worker sent into the
// remote attempt's sealed log: only the types the event table marks as a
// worker's to send (record.WorkerMaySend), an allow list. Anything else
// (the attempt's start and end, commits and branches on serve's
// repositories, serve's verdicts on the cluster, what belongs to the run,
// a type kusaw does not know) would put words in serve's mouth in a
// record serve signs: it is not written, and the first time a type is
// refused serve records that it was (cluster.event_refused), up to
// maxRefusedTypes types per attempt.
func (a *waiting) fromWorker(ev cluster.Event, streamSeq uint64) bool {
	if record.WorkerMaySend(ev.Type) {
		return true
	}
	if a.refused == nil {
		a.refused = map[string]bool{}
	}
	typ := ev.Type
	if len(typ) > 64 {
		typ = typ[:64] + "…"
	}
	if a.refused[typ] || len(a.refused) >= maxRefusedTypes {
		return false
	}
	a.refused[typ] = true
	why := "serve's own"
	if _, known := record.LookupEventType(ev.Type); !known {
		why = "unknown"
	}
	data := map[string]any{"worker": ev.Worker, "type": typ, "why": why}
	if streamSeq > 0 {
		data["stream_seq"] = streamSeq // a re-attaching serve goes on after it
	}
	a.job.Emit(record.EvClusterEventRefused, data)
	return false
}
