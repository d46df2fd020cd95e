package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A ref store is an attempt's private copy of a repository's loose refs.
// The sandbox mounts its refs/ and logs/ over the repository's, so a step
// creates, moves and tags what it likes there while the repository's own
// ref and reflog folders stay read-only to it. Afterwards kusaw reads one
// ref from the store (the attempt branch), checked like any file a step
// wrote, imports the objects it needs, and moves the real branch itself:
// taking the folders away beats checking them afterwards.

// NewRefStore fills dir with a copy of the repository's loose refs (its
// refs/ folder) and an empty logs/ folder. Other runs' attempt branches
// are left out: they are many and no step of this run needs them. It
// returns the number of refs copied.
func (w *Worktree) NewRefStore(dir string) (int, error) {
	if err := checkBranch(w.Branch); err != nil {
		return 0, err
	}
	for _, d := range []string{"refs", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return 0, fmt.Errorf("ref store: %v", err)
		}
	}
	src := filepath.Join(w.CommonDir, "refs")
	skip := filepath.Join(src, "heads", filepath.FromSlash(attemptPrefix))
	own := filepath.Join(skip, filepath.FromSlash(strings.SplitN(strings.TrimPrefix(w.Branch, attemptPrefix), "/", 2)[0]))
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dir, "refs", rel)
		if d.IsDir() {
			if filepath.Dir(p) == skip && p != own {
				return fs.SkipDir
			}
			return os.MkdirAll(to, 0o755)
		}
		b, err := readRegular(p, maxRefSize)
		if err != nil {
			// Not a ref kusaw would read: the step does not see it either.
			return nil
		}
		n++
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		return n, fmt.Errorf("ref store %s: %v", dir, err)
	}
	// The repository's logs/ must exist to be mounted over.
	if err := os.MkdirAll(filepath.Join(w.CommonDir, "logs"), 0o755); err != nil {
		return n, fmt.Errorf("ref store: %v", err)
	}
	return n, nil
}

// AdoptFromStore moves the attempt branch to where the step left it in its
// ref store, after importing the objects that commit needs from objDir.
// The store's ref is read without trust (readRefFile): a symbolic ref, a
// link, a FIFO or anything but one object id is refused with a Finding,
// and the branch stays at its base (CommitAll still commits the files).
// A branch the step deleted stays at the base too. The real branch moves
// with update-ref --no-deref from the value kusaw expects.
func (w *Worktree) AdoptFromStore(store, objDir string) ([]Finding, error) {
	r, err := w.openRepo()
	if err != nil {
		return nil, err
	}
	if err := checkBranch(w.Branch); err != nil {
		return nil, err
	}
	ref := "refs/heads/" + w.Branch
	path := refPath(store, ref)
	tip, ok, err := readRefFile(path)
	if errors.Is(err, errNotRef) {
		return []Finding{{Path: path, Kind: kindOfErr(err), Action: "refused: the branch stays at its base"}},
			fmt.Errorf("the step left its branch %s as something other than one commit (%v); kusaw ignored it and committed the files on the base", w.Branch, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read the step's branch %s: %v", w.Branch, err)
	}
	cur, have, err := r.ownRef(ref)
	if err != nil {
		return nil, fmt.Errorf("read branch %s: %v", w.Branch, err)
	}
	if !ok || (have && tip == cur) {
		return nil, nil
	}
	if err := w.importTip(r, objDir, tip); err != nil {
		return nil, fmt.Errorf("%v (fix: the step left objects whose content does not match their names, or commits with missing objects; its files are committed on top of the base)", err)
	}
	args := []string{"update-ref", "--no-deref", "-m", "kusaw: the step's commits", ref, tip}
	if have {
		args = append(args, cur)
	} else {
		args = append(args, "")
	}
	if _, err := r.git.run(gitCmd{dir: r.workDir(), env: []string{"GIT_DIR=" + r.CommonDir}, args: args}); err != nil {
		return nil, fmt.Errorf("move branch %s to the step's commit: %v", w.Branch, err)
	}
	return nil, nil
}

// CheckOwnRef is for a branch whose folder a step could write in the
// repository itself (no ref store: macOS, or an attempt without one). The
// branch's ref must be one object id in a regular file and its reflog a
// regular file: anything else is removed (never followed or opened), so
// kusaw's own update-ref neither moves another branch through a symbolic
// ref nor appends to the file a link names. A removed ref is recreated at
// the base by CommitAll.
func (w *Worktree) CheckOwnRef() ([]Finding, error) {
	if err := checkBranch(w.Branch); err != nil {
		return nil, err
	}
	ref := "refs/heads/" + w.Branch
	var out []Finding
	var errs []error
	p := refPath(w.CommonDir, ref)
	if _, _, err := readRefFile(p); errors.Is(err, errNotRef) {
		f := Finding{Path: p, Kind: kindOfErr(err), Action: "removed: the branch goes back to its base"}
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			f.Action = "refused (cannot remove: " + rerr.Error() + ")"
			errs = append(errs, rerr)
		}
		out = append(out, f)
	}
	l := refPath(filepath.Join(w.CommonDir, "logs"), ref)
	if fi, err := os.Lstat(l); err == nil {
		if err := regularOne(l, fi); err != nil {
			f := Finding{Path: l, Kind: kindOfErr(err), Action: "removed"}
			if rerr := os.Remove(l); rerr != nil {
				f.Action = "refused (cannot remove: " + rerr.Error() + ")"
				errs = append(errs, rerr)
			}
			out = append(out, f)
		}
	}
	return out, errors.Join(errs...)
}
