package worktree

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// RefGuard remembers the loose refs beside a worktree's own branch ref.
// The sandbox must leave that folder writable (git writes a branch by
// creating a lock file beside it and renaming), so a step could move or
// add the branches of its step's other attempts there; Restore puts them
// back as they were. The worktree's own branch is the step's to move.
type RefGuard struct {
	heads  string            // <common>/refs/heads
	dir    string            // <heads>/<dir of branch>
	own    string            // the own ref's path
	before map[string][]byte // path -> content
	leave  []string          // paths of branches Restore leaves alone
}

// Leave excludes branches from the guard: the candidates of one step run
// at once beside each other, each writing its own branch (and git's lock
// file beside it), so one must not undo what another does meanwhile. They
// run the same step with the same trust.
func (g *RefGuard) Leave(branches ...string) {
	for _, b := range branches {
		g.leave = append(g.leave, filepath.Join(g.heads, filepath.FromSlash(b)))
	}
}

func (g *RefGuard) left(p string) bool {
	for _, l := range g.leave {
		if p == l || strings.HasPrefix(p, l+".") {
			return true
		}
	}
	return false
}

// GuardSiblingRefs snapshots the folder that holds w's branch ref.
func (w *Worktree) GuardSiblingRefs() (*RefGuard, error) {
	heads := filepath.Join(w.CommonDir, "refs", "heads")
	g := &RefGuard{
		heads: heads,
		dir:   filepath.Join(heads, filepath.FromSlash(filepath.Dir(filepath.ToSlash(w.Branch)))),
		own:   filepath.Join(heads, filepath.FromSlash(w.Branch)),
	}
	// Before the step the folder holds only what kusaw's git wrote.
	g.before, _ = g.read()
	return g, nil
}

// read snapshots the regular refs of the folder. Anything else (a link, a
// FIFO, a socket, an unreadable entry) is listed in odd, never opened: one
// bad entry must not stop the guard from seeing the rest.
func (g *RefGuard) read() (refs map[string][]byte, odd map[string]string) {
	refs, odd = map[string][]byte{}, map[string]string{}
	_ = filepath.WalkDir(g.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != g.dir && !errors.Is(err, fs.ErrNotExist) {
				odd[p] = err.Error()
			}
			return nil
		}
		if d.IsDir() || p == g.own {
			return nil
		}
		b, err := readRegular(p, maxRefSize)
		if err != nil {
			odd[p] = kindOfErr(err)
			return nil
		}
		refs[p] = b
		return nil
	})
	return refs, odd
}

// Restore removes refs the step added beside its own and puts back those
// it changed or removed; links, FIFOs and other entries that are not refs
// are removed without being opened. It returns the branches it repaired
// (refs/heads/ relative names) and what it removed, so the caller can
// record what the step tried, and keeps going past every error.
func (g *RefGuard) Restore() ([]string, []Finding, error) {
	now, odd := g.read()
	var repaired []string
	var found []Finding
	var errs []error
	name := func(p string) string {
		if rel, err := filepath.Rel(g.heads, p); err == nil {
			return filepath.ToSlash(rel)
		}
		return p
	}
	for p, why := range odd {
		f := Finding{Path: p, Kind: why, Action: "removed"}
		if err := os.RemoveAll(p); err != nil {
			f.Action = "refused (cannot remove: " + err.Error() + ")"
			errs = append(errs, err)
		}
		found = append(found, f)
	}
	for p := range now {
		if _, ok := g.before[p]; !ok && !g.left(p) {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
				continue
			}
			repaired = append(repaired, name(p))
		}
	}
	for p, b := range g.before {
		if cur, ok := now[p]; ok && bytes.Equal(cur, b) || g.left(p) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		tmp := p + ".kusaw-restore"
		_ = os.Remove(tmp)
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err == nil {
			_, err = f.Write(b)
			err = errors.Join(err, f.Close())
		}
		if err == nil {
			err = os.Rename(tmp, p)
		}
		if err != nil {
			_ = os.Remove(tmp)
			errs = append(errs, err)
			continue
		}
		repaired = append(repaired, name(p))
	}
	sort.Strings(repaired)
	sort.Slice(found, func(i, j int) bool { return found[i].Path < found[j].Path })
	if len(errs) > 0 {
		return repaired, found, fmt.Errorf("restoring the attempt's branch folder %s: %w", g.dir, errors.Join(errs...))
	}
	return repaired, found, nil
}
