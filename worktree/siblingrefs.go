package worktree

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
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
}

// GuardSiblingRefs snapshots the folder that holds w's branch ref.
func (w *Worktree) GuardSiblingRefs() (*RefGuard, error) {
	heads := filepath.Join(w.CommonDir, "refs", "heads")
	g := &RefGuard{
		heads: heads,
		dir:   filepath.Join(heads, filepath.FromSlash(filepath.Dir(filepath.ToSlash(w.Branch)))),
		own:   filepath.Join(heads, filepath.FromSlash(w.Branch)),
	}
	var err error
	g.before, err = g.read()
	return g, err
}

func (g *RefGuard) read() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(g.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() || p == g.own {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = b
		return nil
	})
	return out, err
}

// Restore removes refs the step added beside its own and puts back those
// it changed or removed. It returns the branches it repaired (refs/heads/
// relative names), so the caller can record what the step tried.
func (g *RefGuard) Restore() ([]string, error) {
	now, err := g.read()
	if err != nil {
		return nil, fmt.Errorf("reading the attempt's branch folder %s: %v", g.dir, err)
	}
	var repaired []string
	name := func(p string) string {
		if rel, err := filepath.Rel(g.heads, p); err == nil {
			return filepath.ToSlash(rel)
		}
		return p
	}
	for p := range now {
		if _, ok := g.before[p]; !ok {
			if err := os.RemoveAll(p); err != nil {
				return repaired, err
			}
			repaired = append(repaired, name(p))
		}
	}
	for p, b := range g.before {
		if cur, ok := now[p]; ok && bytes.Equal(cur, b) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return repaired, err
		}
		tmp := p + ".kusaw-restore"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return repaired, err
		}
		if err := os.Rename(tmp, p); err != nil {
			return repaired, err
		}
		repaired = append(repaired, name(p))
	}
	sort.Strings(repaired)
	return repaired, nil
}
