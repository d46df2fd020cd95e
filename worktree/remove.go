package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kusaw/kusaw/internal/rmtree"
)

// forceRemoveAll removes a tree whatever the step did to its folders'
// permissions, never following a link (rmtree.RemoveAll).
func forceRemoveAll(dir string) error { return rmtree.RemoveAll(dir) }

// RemoveUnregistered removes every entry of folder (an interrupted
// attempt's worktrees folder) that none of repos has registered as a
// worktree, and returns their names. A tree taken from a pool sits there
// before its registration (Pool.take, then makeAdmin), with the stage
// folder of its slot beside it; a crash in between leaves trees that
// ListKusawWorktrees cannot find. Registered worktrees are left for
// RemoveWorktree, which drops their registration too. Links are removed,
// never followed; a folder that is itself a link is refused.
func RemoveUnregistered(folder string, repos []*Repo) ([]string, error) {
	fi, err := os.Lstat(folder)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", folder)
	}
	real, err := filepath.EvalSymlinks(folder)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(folder)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		p, rp := filepath.Join(folder, e.Name()), filepath.Join(real, e.Name())
		registered := false
		for _, r := range repos {
			if r.isRegistered(p) || r.isRegistered(rp) {
				registered = true
				break
			}
		}
		if registered {
			continue
		}
		if err := forceRemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %v", p, err))
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}
