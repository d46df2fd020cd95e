package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Attacker's side: a worker tries to fill serve's disk through what it
// may write. The events stream, past its byte limit, drops its oldest
// events and keeps taking new ones (serve has written the old ones into
// its records already); the object store refuses an upload that does
// not fit, at once and without leaving chunks, with a clear error. The
// twin: uploads that fit are stored, and once serve deletes objects the
// room is there again.
func TestStoreLimits(t *testing.T) {
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := s.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const evLimit, objLimit = 64 << 10, 256 << 10
	h, err := SetupWith(ctx, nc, SetupOptions{EventsMaxBytes: evLimit, ObjectsMaxBytes: objLimit})
	if err != nil {
		t.Fatal(err)
	}
	id := joined(t, s, "w")
	wnc, err := Dial(id, "w")
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	wh, err := Open(ctx, wnc)
	if err != nil {
		t.Fatal(err)
	}

	// Events: 4 times the limit, each publish acknowledged.
	wjs, _ := jetstream.New(wnc)
	line := bytes.Repeat([]byte("e"), 1024)
	for i := range 256 {
		if _, err := wjs.Publish(ctx, EventsSubject(Key(fmt.Sprintf("r/s/%d", i)), "w"), line); err != nil {
			t.Fatalf("event %d refused: %v", i, err)
		}
	}
	st, err := h.JS.Stream(ctx, EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > evLimit || info.State.FirstSeq <= 1 || info.State.LastSeq != 256 {
		t.Fatalf("events stream after 256 KiB: %+v (limit %d)", info.State, evLimit)
	}
	if m, err := st.GetMsg(ctx, 256); err != nil || !bytes.Equal(m.Data, line) {
		t.Fatalf("the newest event is not kept: %v", err)
	}

	// Objects.
	dir := t.TempDir()
	file := func(name string, n int) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, bytes.Repeat([]byte(name[:1]), n), 0o600)
		return p
	}
	obs, err := h.JS.Stream(ctx, "OBJ_"+ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	used := func() uint64 {
		i, err := obs.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return i.State.Bytes
	}
	start := time.Now()
	_, _, err = wh.PutFileSum(ctx, "r_s_1/1/big", file("big", 300<<10))
	if !errors.Is(err, ErrObjectsFull) || time.Since(start) > 5*time.Second {
		t.Fatalf("an upload past the limit: %v after %s", err, time.Since(start))
	}
	t.Logf("refused: %v", err)
	if n := used(); n != 0 {
		t.Fatalf("a refused upload left %d bytes", n)
	}
	if _, _, err := wh.PutFileSum(ctx, "r_s_1/1/a", file("a", 100<<10)); err != nil {
		t.Fatalf("an upload that fits: %v", err)
	}
	if _, _, err := wh.PutFileSum(ctx, "r_s_1/1/b", file("b", 100<<10)); err != nil {
		t.Fatalf("a second upload that fits: %v", err)
	}
	if _, _, err := wh.PutFileSum(ctx, "r_s_1/1/c", file("c", 100<<10)); !errors.Is(err, ErrObjectsFull) {
		t.Fatalf("a third upload past the limit: %v", err)
	}
	if n := used(); n > objLimit {
		t.Fatalf("the object store holds %d bytes, past its limit %d", n, objLimit)
	}
	// serve frees an attempt's objects when it ends.
	h.DeleteObjects(ctx, "r/s/1")
	if _, _, err := wh.PutFileSum(ctx, "r_s_2/1/c", file("c", 100<<10)); err != nil {
		t.Fatalf("an upload after serve freed room: %v", err)
	}
}
