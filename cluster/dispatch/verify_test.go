package dispatch

import (
	"testing"

	"github.com/kusaw/kusaw/cluster"
)

// A result without a digest for an object it names is a mismatch, like a
// wrong one; the right one passes.
func TestDigestMatches(t *testing.T) {
	sum := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	r := cluster.Result{Worker: "w1", Digests: map[string]string{"a/1/stdout.log": sum, "a/1/empty": ""}}
	for _, obj := range []string{"a/1/stderr.log", "a/1/empty"} {
		if err := digestMatches(r, obj, sum); err == nil {
			t.Errorf("%s: no digest, accepted", obj)
		}
	}
	if err := digestMatches(r, "a/1/stdout.log", sum[:63]+"0"); err == nil {
		t.Error("a wrong digest accepted")
	}
	if err := digestMatches(r, "a/1/stdout.log", sum); err != nil {
		t.Errorf("the right digest: %v", err)
	}
}
