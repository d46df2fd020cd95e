// Package daemon is the hand-over from kusaw to kusaw-daemon, the program
// that runs kusaw serve and kusaw worker. kusaw parses the command line,
// reads its settings and the factory, and reports bad input as always;
// then it replaces itself (execve, same process) with kusaw-daemon, which
// reads what kusaw decided from a pipe and runs the daemon. The daemon's
// code (nats-server, prometheus, the queue and the cluster) is linked into
// kusaw-daemon alone, so every other start of kusaw, among them each
// sandboxed step's `kusaw sandbox exec`, pays none of its initialisers
// (docs/benchmarks.md, "Lean start, fourth pass: the daemon apart").
// Tailscale's CLI and tailscaled are the model.
//
// The spec travels through a pipe, not the command line or the
// environment: it can hold serve's token and a worker's join token.
package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Program is the daemon's binary, installed beside kusaw (make build,
// make install, go install ./cmd/...).
const Program = "kusaw-daemon"

// SpecFlag names the descriptor the spec is read from.
const SpecFlag = "--spec-fd"

// Spec is what kusaw decided; the daemon runs exactly that.
type Spec struct {
	Command string `json:"command"` // "serve" or "worker"
	// Kusaw is the kusaw binary: built-in steps, the step reaper and the
	// bridge's fallback run as it, not as the daemon.
	Kusaw   string `json:"kusaw"`
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// ProbeCache is the probe_cache setting (sandbox.CheckCacheFile).
	ProbeCache string  `json:"probe_cache,omitempty"`
	Serve      *Serve  `json:"serve,omitempty"`
	Worker     *Worker `json:"worker,omitempty"`
}

// Serve is kusaw serve's resolved command line and settings.
type Serve struct {
	Factory     string        `json:"factory"`   // the factory file, absolute
	StateDir    string        `json:"state_dir"` // the factory's state folder, the state_dir setting applied
	LogLevel    string        `json:"log_level"`
	LogFormat   string        `json:"log_format"`
	Color       bool          `json:"color"`
	Listen      string        `json:"listen,omitempty"`
	Token       string        `json:"token,omitempty"`
	MaxParallel int           `json:"max_parallel,omitempty"`
	Grace       time.Duration `json:"grace"`
	KillGrace   time.Duration `json:"kill_grace,omitempty"`
}

// Worker is kusaw worker's resolved command line and settings.
type Worker struct {
	StateDir       string        `json:"state_dir"`
	Name           string        `json:"name"`
	Join           string        `json:"join,omitempty"`
	Pools          []string      `json:"pools,omitempty"`
	PoolsSet       bool          `json:"pools_set,omitempty"` // --pool given: it replaces the kept pools
	MaxParallel    int           `json:"max_parallel"`
	MaxParallelSet bool          `json:"max_parallel_set,omitempty"`
	DrainTimeout   time.Duration `json:"drain_timeout"`
}

// ErrMissing is returned by Path when kusaw-daemon is not beside kusaw.
var ErrMissing = errors.New(Program + " is not beside kusaw")

// Path is kusaw-daemon beside the kusaw binary at kusaw (symbolic links
// resolved), or ErrMissing naming where it was looked for.
func Path(kusaw string) (string, error) {
	if r, err := filepath.EvalSymlinks(kusaw); err == nil {
		kusaw = r
	}
	p := filepath.Join(filepath.Dir(kusaw), Program)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return p, fmt.Errorf("%w (looked for %s)", ErrMissing, p)
	}
	return p, nil
}

// Exec replaces the calling process with the daemon at path running spec.
// It returns only on failure, and then nothing was started.
func Exec(path string, spec Spec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("the hand-over to %s: %v", Program, err)
	}
	// The spec is far smaller than a pipe's buffer (4 KiB is the least
	// any system gives): written in full before the exec, read after it.
	if len(b) > 4096 {
		r.Close()
		w.Close()
		return fmt.Errorf("the hand-over to %s: the spec is %d bytes, more than a pipe surely holds", Program, len(b))
	}
	if _, err := w.Write(b); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("the hand-over to %s: %v", Program, err)
	}
	w.Close()
	fd := int(r.Fd())
	// The only descriptor that survives the exec besides stdin, stdout
	// and stderr (Go opens all others close-on-exec).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		r.Close()
		return fmt.Errorf("the hand-over to %s: %v", Program, err)
	}
	argv := []string{path, spec.Command, SpecFlag, strconv.Itoa(fd)}
	err = syscall.Exec(path, argv, os.Environ())
	r.Close()
	return fmt.Errorf("cannot start %s: %v", path, err)
}

// Read reads the spec kusaw handed over: args are the daemon's arguments
// after its program name ("serve", "--spec-fd", "N").
func Read(args []string) (Spec, error) {
	var s Spec
	if len(args) != 3 || args[1] != SpecFlag {
		return s, fmt.Errorf("%s is started by kusaw serve and kusaw worker, not by hand (run kusaw serve --help)", Program)
	}
	fd, err := strconv.Atoi(args[2])
	if err != nil || fd < 3 {
		return s, fmt.Errorf("%s %s: %q is not a descriptor", Program, SpecFlag, args[2])
	}
	f := os.NewFile(uintptr(fd), "kusaw-spec")
	if f == nil {
		return s, fmt.Errorf("%s %s %d: no such descriptor", Program, SpecFlag, fd)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return s, fmt.Errorf("%s: reading the spec from kusaw: %v", Program, err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: the spec from kusaw: %v", Program, err)
	}
	if s.Command != args[0] || (s.Command == "serve") != (s.Serve != nil) || (s.Command == "worker") != (s.Worker != nil) {
		return s, fmt.Errorf("%s: the spec is for %q, not %q", Program, s.Command, args[0])
	}
	return s, nil
}
