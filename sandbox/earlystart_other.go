//go:build !linux

package sandbox

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// StartShape is what a bwrap start must fix before the plan is known
// (Linux only).
type StartShape struct {
	Bwrap string
	Tail  []string
	Data  int
}

// ErrShapeChanged says an early start did not fit the plan.
var ErrShapeChanged = errors.New("sandbox: the early start does not fit the plan")

// EarlyStart is Linux only: bwrap started before its plan.
type EarlyStart struct{}

// ShapeOf: no early start off Linux.
func ShapeOf(p *Plan, argv []string) (StartShape, bool, error) { return StartShape{}, false, nil }

// Process is an early start's bwrap (Linux only).
type Process struct{ Pid int }

// Wait: there is no early start to wait for off Linux.
func (p *Process) Wait() (syscall.WaitStatus, error) { return 0, errors.ErrUnsupported }

// StartEarly: no early start off Linux.
func StartEarly(s StartShape, stdin, stdout, stderr *os.File) (*EarlyStart, error) {
	return nil, errors.New("sandbox: an early start needs bubblewrap (Linux)")
}

// Command: never an early start here; start the plan's command as usual.
func (e *EarlyStart) Command(p *Plan, argv []string, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	return nil, ErrShapeChanged
}

// Stop does nothing here.
func (e *EarlyStart) Stop() {}
