package cluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The attacker's side: a worker may publish anything under its objects
// prefix (kusaw.obj.<pool>.w.>), not only what Put writes. A subject of
// another shape (too few tokens, no M or C, one token too many) would be
// kept until it expires in a week, and serve's sweep, which looks for an
// attempt's key at its place in the subject, would never find it. The
// pool's object stream takes only the two shapes objects are made of, so
// each is refused. The twin: the worker's real objects go in, and the
// sweep sees their attempt.
func TestObjectSubjectShapes(t *testing.T) {
	s, ctx, sh := serveWithPool(t, "default")
	_, wh := workerConn(t, s, "mal", Grant{})
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		t.Cleanup(cancel)
		return c
	}
	for _, subj := range []string{
		"kusaw.obj.default.w.junk",
		"kusaw.obj.default.w.M.junk1",
		"kusaw.obj.default.w.M.junk2.0",
		"kusaw.obj.default.w.X.junk3.0.eA",
		"kusaw.obj.default.w.M.junk4.0.eA.extra",
		"kusaw.obj.default.w.C.junk5.0.id",
		"kusaw.obj.default.w.C.junk6.0.id.0.extra",
	} {
		if _, err := wh.JS.Publish(short(), subj, []byte(strings.Repeat("j", 1000))); err == nil {
			t.Errorf("the objects stream kept a message on %s", subj)
		}
	}
	if n := streamState(t, sh, ObjectsStream("default")).Msgs; n != 0 {
		t.Errorf("the objects stream holds %d junk messages", n)
	}
	name := ObjectName("default", "r/s/1", 7, "stdout.log")
	if _, err := wh.PutBytes(ctx, name, []byte("out")); err != nil {
		t.Fatalf("the twin: a real object: %v", err)
	}
	if b, err := sh.GetBytes(ctx, name); err != nil || string(b) != "out" {
		t.Fatalf("the twin read back: %q %v", b, err)
	}
	if keys, _ := sh.ObjectKeys(ctx, "default"); len(keys) != 1 || keys[0] != Key("r/s/1") {
		t.Errorf("the sweep sees %v, want the real object's attempt", keys)
	}
}
