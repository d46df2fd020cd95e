//go:build !(linux && (amd64 || arm64))

package sandbox

import (
	"errors"
	"os"
	"runtime"
)

var errNoSeccomp = errors.New("kusaw has no seccomp filter for " + runtime.GOOS + "/" + runtime.GOARCH)

// SeccompFilter: there is no filter for this platform.
func SeccompFilter() ([]byte, error) { return nil, errNoSeccomp }

func seccompFile() (*os.File, error) { return nil, errNoSeccomp }
