package record

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotArtifact is an artifact that is not a small regular file of the
// attempt's artifacts/ folder.
var ErrNotArtifact = errors.New("not a regular file in the attempt's artifacts")

// ReadArtifact reads the file name (one plain name) of an attempt's
// artifacts/ folder, at most max bytes. A step writes what it likes there,
// and kusaw reads it outside every sandbox: a link (to a host file the step
// could not read, or to /dev/zero), a FIFO (an open that never returns), a
// device or a file larger than max is refused, never followed or read.
func ReadArtifact(attemptDir, name string, max int64) ([]byte, error) {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return nil, fmt.Errorf("%w: %q is not a plain file name", ErrNotArtifact, name)
	}
	dir := filepath.Join(attemptDir, ArtifactsDir)
	if fi, err := os.Lstat(dir); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a folder", ErrNotArtifact, dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	// O_NOFOLLOW: a link at the name fails the open; O_NONBLOCK: a FIFO
	// opens without waiting for a writer, then fails the check below.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if fi, lerr := root.Lstat(name); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%w: %s is a link", ErrNotArtifact, name)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotArtifact, name, fileKind(fi.Mode()))
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%w: %s has %d bytes, more than %d", ErrNotArtifact, name, fi.Size(), max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSocket != 0:
		return "socket"
	case m.IsDir():
		return "folder"
	}
	return "special file"
}
