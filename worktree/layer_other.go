//go:build !linux

package worktree

import "errors"

// layerEntry is one path a write layer changed (Linux only).
type layerEntry struct {
	path string
	kind byte
	mode uint32
}

var errNoLayer = errors.New("a write layer needs Linux (an overlay mount in the sandbox)")

// NewLayer needs Linux.
func (w *Worktree) NewLayer() (string, error) { return "", errNoLayer }

// Layer is "" where there are no write layers.
func (w *Worktree) Layer() string { return w.layer }

// ApplyLayer needs Linux.
func (w *Worktree) ApplyLayer(dir string) error { return errNoLayer }

// DropLayer has nothing to drop where there are no write layers.
func (w *Worktree) DropLayer() error { return nil }
