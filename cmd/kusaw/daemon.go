package main

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/kusaw/kusaw/internal/daemon"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

// handOver replaces kusaw with kusaw-daemon running spec (serve or
// worker), once kusaw has read the command line, its settings and the
// factory: the daemon's code is not linked into kusaw (package
// internal/daemon says why). It returns only when the daemon could not
// start.
func (a *app) handOver(spec daemon.Spec) error {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return exitf(status.ExitInternal, "cannot find the kusaw binary: %v", err)
	}
	bi := buildVersion()
	spec.Kusaw, spec.Version, spec.Commit, spec.ProbeCache = exe, bi.Version, bi.Commit, sandbox.CheckCacheFile
	path, err := daemon.Path(exe)
	if errors.Is(err, daemon.ErrMissing) {
		return exitf(status.ExitServeUnavailable, "kusaw %s runs as %s, which is not beside kusaw (%s): install the three programs together (make install, or go install ./cmd/...)", spec.Command, daemon.Program, path)
	}
	if err != nil {
		return exitf(status.ExitServeUnavailable, "%v", err)
	}
	return exitf(status.ExitServeUnavailable, "kusaw %s: %v", spec.Command, daemon.Exec(path, spec))
}
