//go:build linux

package attempt

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// A full state folder ends the attempt within its grace, naming the file
// and the folder, instead of leaving the step blocked on its pipe until a
// timeout: a 3 MB tmpfs, a step that prints 10 MB. What was sealed before
// the failure still verifies.
func TestFullStateFolderEndsTheAttempt(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test mounts a 3 MB tmpfs and needs root: run it as root (CI does)")
		}
		t.Skip("needs root to mount a tmpfs (TestWriteFailureStopsTheAttempt covers the rest)")
	}
	h, spec, job, _ := fixture(t, "flood")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v\n%s", mnt, err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	h.StateDir = filepath.Join(mnt, "state")
	job.Dir = record.AttemptDir(filepath.Join(h.StateDir, record.RunsDir, spec.Run), spec.Step, spec.Number)
	rec := Run(context.Background(), h, spec, job)
	if rec.Outcome != status.OutcomeFailed || rec.Reason != status.ReasonStateWriteFailed {
		t.Fatalf("attempt %s %s: %s (want failed %s)", rec.Outcome, rec.Reason, rec.Message, status.ReasonStateWriteFailed)
	}
	if !strings.Contains(rec.Message, filepath.Join(job.Dir, record.StdoutFile)) || !strings.Contains(rec.Fix, h.StateDir) {
		t.Errorf("the message or fix does not name the file and the folder:\n%s\n%s", rec.Message, rec.Fix)
	}
	// The events verify up to where the disk was full: nothing kusaw
	// sealed is lost or broken.
	res, err := chainlog.VerifyFile(filepath.Join(job.Dir, record.EventsFile), h.Key.Public().(ed25519.PublicKey), chainlog.Binding{Run: spec.Run, Step: spec.Step, Attempt: spec.Number, Kind: chainlog.KindEvents})
	if err != nil {
		t.Errorf("events: %v (%+v)", err, res)
	}
	t.Logf("%s: %s\nfix: %s\nevents: %d lines verified, final %v", rec.Reason, rec.Message, rec.Fix, res.Lines, res.Final)
}

// failingLog is an events file whose writes fail (a full disk).
type failingLog struct{}

func (failingLog) Append(any) error           { return syscall.ENOSPC }
func (failingLog) Seal() error                { return syscall.ENOSPC }
func (failingLog) Close() error               { return syscall.ENOSPC }
func (failingLog) LastSeal() chainlog.SealRef { return chainlog.SealRef{} }

// failAfter writes n bytes, then fails as a full disk does.
type failAfter struct{ n int }

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, syscall.ENOSPC
	}
	w.n -= len(p)
	return len(p), nil
}

// A write that fails, of the output or of the events, stops the attempt's
// processes at once and names the file (an injected failure: no root
// needed); the output is drained after it, so the process never blocks.
func TestWriteFailureStopsTheAttempt(t *testing.T) {
	newAttempt := func() (*Attempt, context.Context) {
		ctx, stop := context.WithCancelCause(context.Background())
		a := &Attempt{h: &Host{StateDir: "/srv/kusaw/state"}, rec: &record.AttemptRecord{}, redact: &Redactor{}, stop: stop}
		return a, ctx
	}
	a, ctx := newAttempt()
	g := &guardedWriter{a: a, path: "/srv/kusaw/state/runs/r/steps/s/1/stdout.log", w: &failAfter{n: 10}}
	for i := 0; i < 3; i++ {
		if n, err := g.Write([]byte("0123456789abcdef")); n != 16 || err != nil {
			t.Fatalf("write %d: %d %v: the process would block on its pipe", i, n, err)
		}
	}
	if !errors.Is(context.Cause(ctx), errWriteFailed) {
		t.Errorf("the processes were not stopped: %v", context.Cause(ctx))
	}
	a.decide()
	if a.rec.Reason != status.ReasonStateWriteFailed || !strings.Contains(a.rec.Message, "stdout.log") || !strings.Contains(a.rec.Fix, "/srv/kusaw/state") {
		t.Errorf("record %s: %s (fix %s)", a.rec.Reason, a.rec.Message, a.rec.Fix)
	}

	a, ctx = newAttempt()
	a.dir = "/srv/kusaw/state/runs/r/steps/s/1"
	s := &Sink{log: failingLog{}, onErr: func(err error) { a.writeFailed(filepath.Join(a.dir, record.EventsFile), err) }}
	s.Emit(record.EvAttemptStarted, map[string]any{"attempt": 1})
	if !errors.Is(context.Cause(ctx), errWriteFailed) || !errors.Is(s.Err(), syscall.ENOSPC) {
		t.Errorf("a failed event write went unnoticed: %v %v", context.Cause(ctx), s.Err())
	}
	a.decide()
	if a.rec.Reason != status.ReasonStateWriteFailed || !strings.Contains(a.rec.Message, "events.jsonl") {
		t.Errorf("record %s: %s", a.rec.Reason, a.rec.Message)
	}
	// The twin: a sink that writes fine says nothing.
	a, ctx = newAttempt()
	ok := &Sink{onErr: func(err error) { a.writeFailed("x", err) }}
	ok.Emit(record.EvAttemptStarted, nil)
	if context.Cause(ctx) != nil || a.writeFailure() {
		t.Errorf("a sink without failures stopped the attempt")
	}
}
