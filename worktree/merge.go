package worktree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Merges of parallel work into a run branch, done with git outside every
// sandbox and with kusaw's identity where the repository sets none. They
// never touch a checkout: merge-tree computes the result in the object
// database, so a merge that conflicts leaves nothing behind.

// ErrConflict is wrapped by Merge when git cannot merge on its own.
var ErrConflict = errors.New("merge conflict")

// ConflictError names the files a merge could not resolve.
type ConflictError struct {
	Ours, Theirs string
	Files        []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("merging %s into %s conflicts in %s", short(e.Theirs), short(e.Ours), strings.Join(e.Files, ", "))
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Merge makes a merge commit of theirs into ours (both commits) and returns
// it; it moves no branch. When theirs is already in ours, ours is returned
// unchanged; when ours is in theirs, the merge still gets its own commit, so
// the run branch shows where each piece of parallel work joined. A conflict
// is a *ConflictError.
func (r *Repo) Merge(ours, theirs, msg string) (string, error) {
	if ours == theirs {
		return ours, nil
	}
	if ok, err := r.rd.isAncestor(theirs, ours); err != nil {
		return "", fmt.Errorf("merge %s: %v", short(theirs), err)
	} else if ok {
		return ours, nil
	}
	out, err := r.git.run(gitCmd{dir: r.workDir(), args: []string{"merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", ours, theirs}})
	parts := bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0})
	if err != nil {
		if exitCodeOf(err) == 1 && len(parts) > 1 {
			ce := &ConflictError{Ours: ours, Theirs: theirs}
			for _, p := range parts[1:] {
				if len(p) > 0 && !contains(ce.Files, string(p)) {
					ce.Files = append(ce.Files, string(p))
				}
			}
			return "", ce
		}
		return "", fmt.Errorf("merge %s into %s in %s: %v", short(theirs), short(ours), r, err)
	}
	tree := string(parts[0])
	return r.commitTree(tree, []string{ours, theirs}, msg)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// commitTree writes a commit of tree with the parents given.
func (r *Repo) commitTree(tree string, parents []string, msg string) (string, error) {
	ident, err := r.identityArgs(nil, r.workDir())
	if err != nil {
		return "", err
	}
	args := append(ident, "commit-tree", tree)
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	out, err := r.git.run(gitCmd{dir: r.workDir(), stdin: strings.NewReader(msg), args: args})
	if err != nil {
		return "", fmt.Errorf("commit merge in %s: %v", r, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// StartMerge merges theirs into the worktree's checkout without committing,
// leaving git's conflict markers in the files: what a resolve step edits.
// It returns the conflicted files. CommitAll then records the merge with
// theirs as the second parent (set in MergeParents).
func (w *Worktree) StartMerge(theirs string) ([]string, error) {
	if len(w.Sparse) > 0 {
		// The commit keeps everything outside the cone as in the base,
		// which would undo the merge there.
		return nil, fmt.Errorf("start merge of %s in %s: the worktree is sparse (repos.NAME.sparse); a merge needs the whole tree (fix: remove sparse: from the repository, or resolve in a pipeline without it)", short(theirs), w.Path)
	}
	r, err := w.openRepo()
	if err != nil {
		return nil, err
	}
	env := []string{"GIT_DIR=" + w.GitDir, "GIT_WORK_TREE=" + w.Path}
	ident, err := r.identityArgs(env, w.Path)
	if err != nil {
		return nil, err
	}
	_, err = r.git.run(gitCmd{dir: w.Path, env: env, args: append(ident, "merge", "--no-commit", "--no-ff", "--quiet", theirs)})
	if err != nil && exitCodeOf(err) != 1 {
		return nil, fmt.Errorf("start merge of %s in %s: %v", short(theirs), w.Path, err)
	}
	out, derr := r.git.run(gitCmd{dir: w.Path, env: env, args: []string{"diff", "--name-only", "-z", "--diff-filter=U"}})
	if derr != nil {
		return nil, fmt.Errorf("list conflicts in %s: %v", w.Path, derr)
	}
	var files []string
	for _, p := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		if len(p) > 0 {
			files = append(files, string(p))
		}
	}
	w.MergeParents = append(w.MergeParents, theirs)
	return files, nil
}

// Export writes the files of commit into dir (which must not exist): a
// plain copy with no git metadata, for a step that may only read them.
func (r *Repo) Export(commit, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "kusaw-export-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}
	if _, err := r.git.run(gitCmd{dir: r.workDir(), env: env, args: []string{"read-tree", commit}}); err != nil {
		return fmt.Errorf("export %s: %v", short(commit), err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := r.git.run(gitCmd{dir: r.workDir(), env: env, args: []string{"checkout-index", "--all", "--force", "--prefix=" + abs + "/"}}); err != nil {
		return fmt.Errorf("export %s: %v", short(commit), err)
	}
	return nil
}

// IsAncestor reports whether commit a is in the history of commit d.
func (r *Repo) IsAncestor(a, d string) (bool, error) { return r.rd.isAncestor(a, d) }

// SetBranch moves a kusaw branch from old to sha (old "" creates it):
// git refuses when the branch is no longer at old, so two writers cannot
// both win.
func (r *Repo) SetBranch(branch, old, sha string) error {
	if err := checkBranch(branch); err != nil {
		return err
	}
	_, err := r.git.run(gitCmd{dir: r.workDir(), args: []string{"update-ref", "-m", "kusaw: merge", "refs/heads/" + branch, sha, old}})
	if err != nil {
		return fmt.Errorf("move %s to %s in %s: %v", branch, short(sha), r, err)
	}
	return nil
}

// PatchSize is the size in bytes of the patch from one commit to another
// (binary changes included, as git would send them), counted as git
// writes it: a candidate that wrote gigabytes is measured without being
// held in memory. No external diff driver or text conversion runs.
func (r *Repo) PatchSize(from, to string) (int64, error) {
	gitRuns.Add(1)
	args := append(append([]string{}, safeConfig...), "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv", from, to, "--")
	cmd := exec.Command(r.git.bin, args...)
	cmd.Dir = r.workDir()
	cmd.Env = append([]string{}, r.git.env...)
	var n countWriter
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &n, &errb
	if err := cmd.Run(); err != nil {
		return 0, &gitError{args: args[len(safeConfig):], stderr: errb.String(), err: err}
	}
	return int64(n), nil
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
