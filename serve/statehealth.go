package serve

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// writeTestSize is what the write test writes: room for a few records,
// so a folder with a handful of bytes left is not called writable.
const writeTestSize = 64 << 10

// writeTestEvery bounds how often the write test runs: health is asked
// by every command that dials serve and by the web page every 2 s.
const writeTestEvery = 2 * time.Second

// stateHealth is whether serve's state folder takes writes, for
// /v1/health. The write test decides: a file of writeTestSize bytes
// written in the folder and removed. An attempt that ended with
// state.write_failed makes the next health answer test again at once and
// name the failed file; once the test passes the folder is reported
// writable again (a worker's own disk is not serve's, so an attempt's
// failure alone never marks the folder full).
type stateHealth struct {
	dir   string
	log   zerolog.Logger
	now   func() time.Time
	write func(dir string) error // writeTest

	mu       sync.Mutex
	tested   time.Time  // last write test
	failure  string     // an attempt's failure noted since the last test
	problem  *stateFull // nil: the last test passed
	testLock sync.Mutex // one write test at a time
}

// stateFull is what a failed write test found.
type stateFull struct {
	since   time.Time
	message string
}

func newStateHealth(dir string, log zerolog.Logger) *stateHealth {
	return &stateHealth{dir: dir, log: log, now: time.Now, write: writeTest}
}

// event notes an attempt that ended because a record could not be
// written.
func (h *stateHealth) event(ev record.Event) {
	if ev.Type != record.EvAttemptFinished || fmt.Sprint(ev.Data["reason"]) != string(status.ReasonStateWriteFailed) {
		return
	}
	h.mu.Lock()
	h.failure = fmt.Sprintf("attempt %d of step %s (run %s): %v", ev.Attempt, ev.Step, ev.Run, ev.Data["message"])
	h.mu.Unlock()
}

// health is the folder's part of /v1/health, testing it again when the
// last test is old or an attempt failed since.
func (h *stateHealth) health() *client.StateHealth {
	h.testLock.Lock()
	defer h.testLock.Unlock()
	h.mu.Lock()
	due := h.failure != "" || h.tested.IsZero() || h.now().Sub(h.tested) >= writeTestEvery
	h.mu.Unlock()
	if due {
		h.test()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := &client.StateHealth{Dir: h.dir, Writable: h.problem == nil}
	if p := h.problem; p != nil {
		since := p.since.UTC()
		out.Since = &since
		out.Reason = status.ReasonStateWriteFailed
		out.Message = p.message
		out.Fix = fmt.Sprintf("free space on the file system that holds %s (df -h %s) or raise its quota; serve tests the folder again at each health check and reports it writable once a write there succeeds", h.dir, h.dir)
	}
	return out
}

// test writes and removes a file in the folder, and records the verdict.
func (h *stateHealth) test() {
	err := h.write(h.dir)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tested = h.now()
	failure := h.failure
	h.failure = ""
	switch {
	case err != nil && h.problem == nil:
		msg := fmt.Sprintf("the state folder %s is full or not writable: %v", h.dir, err)
		if failure != "" {
			msg += "; " + failure
		}
		h.problem = &stateFull{since: h.tested, message: msg}
		h.log.Error().Str("state_dir", h.dir).Err(err).Str("attempt", failure).Msg("the state folder takes no writes: attempts fail with state.write_failed until space is freed")
	case err != nil && failure != "":
		h.problem.message = fmt.Sprintf("the state folder %s is full or not writable: %v; %s", h.dir, err, failure)
	case err == nil && h.problem != nil:
		h.log.Info().Str("state_dir", h.dir).Dur("after", h.tested.Sub(h.problem.since)).Msg("the state folder is writable again")
		h.problem = nil
	}
}

// writeTest writes writeTestSize bytes to a new file in dir and removes it.
func writeTest(dir string) error {
	f, err := os.CreateTemp(dir, ".write-test-")
	if err != nil {
		return unwrapPath(err)
	}
	name := f.Name()
	defer os.Remove(name)
	// No fsync: the space is taken at write on the file systems kusaw
	// runs on, and a file removed at once never reaches the disk, so a
	// page open on the web, asking every 2 s, costs the disk nothing.
	_, err = f.Write(make([]byte, writeTestSize))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return unwrapPath(err)
}

// unwrapPath is a path error's cause: the test file's random name says
// nothing to the reader.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
