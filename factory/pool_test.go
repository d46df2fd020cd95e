package factory

import (
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/testkit"
)

// W13: a pool nobody offered warns; an offered one, default on serve's
// local worker, and a factory without pools do not.
func TestPoolNeverOffered(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
serve:
  cluster: {listen: "127.0.0.1:7422"}
pipelines:
  default: [a, b, c]
steps:
  a: {run: [true], pool: gpu}
  b: {run: [true], pool: mac}
  c: {run: [true]}
`, "app")
	v := &Validator{PoolsOffered: func() map[string]bool { return map[string]bool{"mac": true} }}
	r := v.Validate(f, nil)
	var got []string
	for _, w := range r.Warnings {
		if w.Code == config.WCodePoolNeverOffered {
			got = append(got, w.Path+": "+w.Message)
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "steps.a.pool: no worker has ever offered pool gpu") {
		t.Fatalf("W13 findings: %q", got)
	}
	f.Serve.Cluster.LocalWorker = false
	r = v.Validate(f, nil)
	n := 0
	for _, w := range r.Warnings {
		if w.Code == config.WCodePoolNeverOffered {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("without serve's local worker, pool default needs a worker too: %d warnings", n)
	}
	// Allowed pools: a pool no join token allows says so; one a token
	// allows (or a token of every pool) but nobody offered yet says that.
	f.Serve.Cluster.LocalWorker = true
	for _, c := range []struct {
		allowed map[string]bool
		want    string
	}{
		{map[string]bool{"mac": true}, "steps.a.pool: no enrolled worker may take pool gpu"},
		{map[string]bool{"mac": true, "gpu": true}, "steps.a.pool: no worker has ever offered pool gpu"},
		{map[string]bool{"*": true}, "steps.a.pool: no worker has ever offered pool gpu"},
	} {
		v.PoolsAllowed = func() map[string]bool { return c.allowed }
		got = nil
		for _, w := range v.Validate(f, nil).Warnings {
			if w.Code == config.WCodePoolNeverOffered {
				got = append(got, w.Path+": "+w.Message+" | "+w.Fix)
			}
		}
		if len(got) != 1 || !strings.HasPrefix(got[0], c.want) {
			t.Fatalf("allowed %v: W13 findings %q", c.allowed, got)
		}
	}
}
