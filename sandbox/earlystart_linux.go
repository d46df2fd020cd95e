//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// An early start overlaps bwrap's own start (its exec, the dynamic
// loader, its set-up: about 2 ms of a 6-10 ms bwrap) with kusaw's work
// before the plan is ready (docs/benchmarks.md, "Lean start, eighth
// pass"). bwrap reads --args FD to its end before it acts, so bwrap can
// start at once with a pipe as that file, and get the plan's options
// when the plan is ready. What bwrap takes at its start cannot wait for
// the plan: the command it runs (after "--") and its descriptors (the
// empty files' count). The caller guesses them (StartShape, from the
// last start in the same folder); the plan's own start is compared with
// the guess and, when it differs, that bwrap is killed before it has
// read a byte and the plan starts a bwrap of its own (ErrShapeChanged).
//
// bwrap's command line is --disable-userns --args 3 -- TAIL: the
// options, the environment among them, go through the pipe, so no value
// of the environment shows in /proc/PID/cmdline. bwrap refuses
// --disable-userns without --unshare-user, which only the pipe carries:
// a pipe closed before the plan's options were written (kusaw killed
// meanwhile) ends bwrap with that error before it does anything. The
// options are one write into a pipe that holds them all, so bwrap reads
// all of them or nothing, never a part.

// StartShape is what a bwrap start must fix before the plan is known.
type StartShape struct {
	Bwrap string   // the trusted bwrap (FindBwrap)
	Tail  []string // what bwrap runs, after "--": the confinement stage, the wrapper, the command
	Data  int      // the empty files' descriptors (the plan's empty-file mounts)
}

// ErrShapeChanged says an early start did not fit the plan: it was
// stopped, and the plan's command must be started as usual (Command).
var ErrShapeChanged = errors.New("sandbox: the early start does not fit the plan")

// earlySentinel comes before --args on bwrap's command line: bwrap
// refuses it without the --unshare-user that only the pipe carries.
const earlySentinel = "--disable-userns"

// ShapeOf is the shape of p's start of argv; ok is false when an early
// start cannot serve it (a bwrap without --disable-userns, the
// sentinel).
func ShapeOf(p *Plan, argv []string) (s StartShape, ok bool, err error) {
	st, err := startArgs(p, argv)
	if err != nil {
		return StartShape{}, false, err
	}
	return StartShape{Bwrap: st.bw, Tail: st.tail, Data: st.data}, earlyFits(p, st), nil
}

// earlyFits: an early start can serve p's start st. Not a plan with
// write layers (its process is the stage that mounts them, Command), nor
// a bwrap without --disable-userns (the sentinel).
func earlyFits(p *Plan, st bwrapStart) bool {
	return len(p.WriteLayers) == 0 && slices.Contains(st.opts, "--unshare-user") && slices.Contains(st.opts, earlySentinel)
}

// EarlyStart is a bwrap started before its plan was ready, waiting for
// its options on a pipe.
type EarlyStart struct {
	shape  StartShape
	proc   *Process
	args   []string // bwrap's command line, its path first
	files  int      // its descriptors from 3 on
	w      *os.File // the pipe's write end: bwrap's options go here, once
	stdio  [3]*os.File
	ended  bool       // handed over (Command) or stopped
	filter chan error // the filter's write: done (nil) or failed
}

// StartEarly starts bwrap for s, its standard streams the given files
// (nil: /dev/null); it waits for its options (EarlyStart.Command) or its
// end (Stop). It is started as Command's bwrap is (no environment, a
// process group of its own, killed with this thread), without os/exec
// (Process).
func StartEarly(s StartShape, stdin, stdout, stderr *os.File) (*EarlyStart, error) {
	if len(s.Tail) == 0 || s.Data < 0 {
		return nil, errors.New("sandbox: an early start needs a command")
	}
	// Only the bwrap kusaw would trust now.
	if bw, err := FindBwrap(); err != nil || bw != s.Bwrap {
		return nil, fmt.Errorf("sandbox: %s is not the trusted bwrap", s.Bwrap)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	// The filter too comes through a pipe, written on a goroutine once
	// bwrap has started: building it is no part of bwrap's start.
	// Command writes the options only after it, and bwrap reads it only
	// after them.
	sr, sw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	args := append([]string{s.Bwrap, earlySentinel, "--args", "3", "--"}, s.Tail...)
	files, err := dataFiles(r, s.Data, sr)
	if err != nil {
		closeFiles([]*os.File{r, w, sr, sw})
		return nil, err
	}
	proc, err := startProcess(args, append([]*os.File{stdin, stdout, stderr}, files...))
	closeFiles(files)
	if err != nil {
		w.Close()
		sw.Close()
		return nil, err
	}
	earlyStarted.Store(true)
	e := &EarlyStart{shape: s, proc: proc, args: args, files: len(files), w: w, stdio: [3]*os.File{stdin, stdout, stderr}, filter: make(chan error, 1)}
	go func() {
		prog, err := SeccompFilter()
		if err == nil {
			err = writeAll(sw, prog)
		}
		sw.Close()
		e.filter <- err
	}()
	return e, nil
}

// writeAll writes b in one write, which a pipe takes whole.
func writeAll(f *os.File, b []byte) error {
	n, err := f.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// closeFiles closes this process's copies of what a child was given.
func closeFiles(files []*os.File) {
	for i, f := range files {
		if i == 0 || f != files[i-1] { // the empty files' /dev/null is one file
			f.Close()
		}
	}
}

// Command gives the early bwrap p's options for argv and returns it,
// started: the caller waits for it and then calls p.Cleanup(), as after
// Command and Start, and stops it by signalling its process group. When
// p's start is not the early one's shape, or its streams are not the
// early one's, it stops the early bwrap and returns ErrShapeChanged:
// start the plan's command as usual then. After any other error the
// early bwrap is stopped too.
func (e *EarlyStart) Command(p *Plan, argv []string, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	if e == nil || e.ended {
		return nil, ErrShapeChanged
	}
	st, err := startArgs(p, argv)
	if err != nil {
		e.Stop()
		return nil, err
	}
	if st.bw != e.shape.Bwrap || st.data != e.shape.Data || !slices.Equal(st.tail, e.shape.Tail) || !earlyFits(p, st) ||
		!sameFile(stdin, e.stdio[0]) || !sameFile(stdout, e.stdio[1]) || !sameFile(stderr, e.stdio[2]) {
		e.Stop()
		return nil, ErrShapeChanged
	}
	if err := <-e.filter; err != nil {
		e.filter <- err
		e.Stop()
		return nil, filterError(err)
	}
	e.filter <- nil
	content := earlyOptions(st)
	if !e.pipeHolds(len(content)) {
		e.Stop()
		return nil, ErrShapeChanged
	}
	if err := p.Prepare(); err != nil {
		e.Stop()
		return nil, err
	}
	// As Command's last step: the stand-ins before bwrap mounts on them.
	p.takeStandIns()
	n, err := e.w.Write(content)
	if err != nil || n != len(content) {
		e.Stop() // the caller's Cleanup gives the stand-ins back
		return nil, fmt.Errorf("sandbox: giving bwrap its options: wrote %d of %d bytes: %v", n, len(content), err)
	}
	e.w.Close()
	e.ended = true
	return e.proc, nil
}

// pipeHolds makes the pipe hold n bytes, so one write puts all of them in
// before bwrap reads any.
func (e *EarlyStart) pipeHolds(n int) bool {
	fd := int(e.w.Fd())
	size, err := unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		return false
	}
	if size >= n {
		return true
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, n)
	return err == nil && got >= n
}

// Stop ends an early bwrap not handed over: killed before it has read its
// options, waited for, its pipe closed. Safe to call more than once, and
// after Command (then it does nothing).
func (e *EarlyStart) Stop() {
	if e == nil || e.ended {
		return
	}
	e.ended = true
	// Killed first, then the pipe closed: it never reads an end of file
	// while it can still act on one.
	_ = e.proc.Kill()
	_, _ = e.proc.Wait()
	e.w.Close()
	<-e.filter // the filter's writer is done with its pipe
}

// sameFile: the stream a caller gives is the file the early bwrap got.
func sameFile(a any, f *os.File) bool {
	if a == nil {
		return f == nil
	}
	g, ok := a.(*os.File)
	return ok && g == f
}

// earlyOptions is what an early bwrap reads on its pipe: the options
// Command puts on bwrap's command line before --args, then what its
// --args file holds.
func earlyOptions(st bwrapStart) []byte { return nulJoined(st.opts, st.env) }

// nulJoined is the --args file's content: each argument ends in a NUL.
func nulJoined(parts ...[]string) []byte {
	n := 0
	for _, p := range parts {
		for _, a := range p {
			n += len(a) + 1
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range parts {
		for _, a := range p {
			b.WriteString(a)
			b.WriteByte(0)
		}
	}
	return []byte(b.String())
}
