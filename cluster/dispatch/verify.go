package dispatch

import (
	"context"
	"fmt"
	"os"

	"github.com/kusaw/kusaw/cluster"
)

// EvObjectRefused names an object of a result serve did not take: it
// changed in the store after the worker uploaded it (its SHA-256 is not
// the result's), or could not be fetched.
const EvObjectRefused = "cluster.object_refused"

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
