package worktree

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// Worktree is one linked git worktree of one attempt.
type Worktree struct {
	Repo      string // the repository's top level (or git dir when bare)
	Path      string // the worktree's directory
	Branch    string // its branch, without refs/heads/
	GitDir    string // its administrative directory, <CommonDir>/worktrees/<x>
	CommonDir string // the repository's git directory
	BaseSHA   string // the commit it was created at (empty when listed)
	// MergeParents are further parents of the next CommitAll: set by
	// StartMerge, so a resolve step's commit completes the merge.
	MergeParents []string
	// Reused: the tree came from the repository's pool, cleaned (what the
	// cleaning found is in Cleaned); ReuseFailed says why a tree the pool
	// gave was checked out afresh instead.
	Reused      bool
	Cleaned     CleanReport
	ReuseFailed string
	// Sparse are the cone folders of a sparse worktree (AddOptions.Sparse):
	// its commit keeps everything outside them as in BaseSHA.
	Sparse []string

	repo   *Repo
	index  string        // the trusted index of its checkout (held in pool), "" when none
	parsed *trustedIndex // index parsed, nil until needed
	survey *survey       // what the last commit found in the tree, for Release
	pool   *Pool

	// The write layer (layer_linux.go): its folder while the step may
	// write it, what ApplyLayer found (the survey of the tree from then
	// on), and what kusaw wrote into the tree before the step.
	layer       string
	layerSurvey *survey
	noted       []string
	// LayerDropped: what ApplyLayer did not carry into the tree (FIFOs,
	// sockets, devices, .git entries).
	LayerDropped []Finding
	// Trusted: the tree came from the pool released by its write layer's
	// survey, so its take skipped the cleaning walk.
	Trusted bool
}

// AddOptions are what AddAttemptWith adds to AddAttempt.
type AddOptions struct {
	// Pool, when set, gives a tree an earlier attempt left (cleaned)
	// instead of a fresh checkout, keeps kusaw's own index of the checkout
	// for CommitAll, and takes the tree back at Release.
	Pool *Pool
	// NewRunBase, when set, makes the run branch at this commit first
	// (AddAttemptNewRun).
	NewRunBase string
	// Sparse, when set, are the folders the worktree checks out (git's
	// cone mode, repos.NAME.sparse); the tree is never taken from or given
	// to the pool.
	Sparse []string
}

// AddAttempt creates branch attemptBranch at the current head of runBranch
// and a linked worktree for it at dir (which must not exist or be empty).
func (r *Repo) AddAttempt(runBranch, attemptBranch, dir string) (*Worktree, error) {
	return r.addAttempt(runBranch, attemptBranch, dir, AddOptions{})
}

// AddAttemptWith is AddAttempt (or AddAttemptNewRun, with o.NewRunBase)
// with a pool of trees to reuse.
func (r *Repo) AddAttemptWith(runBranch, attemptBranch, dir string, o AddOptions) (*Worktree, error) {
	if o.NewRunBase != "" && !isHash(o.NewRunBase) {
		return nil, fmt.Errorf("add worktree: base %q is not a full commit hash", o.NewRunBase)
	}
	return r.addAttempt(runBranch, attemptBranch, dir, o)
}

// AddAttemptNewRun is AddAttempt on a run branch that does not exist yet:
// runBranch is created at base together with attemptBranch (a worker's
// branch of one attempt), in the same git process when the worktree is
// made plainly. A run branch that exists already is refused.
func (r *Repo) AddAttemptNewRun(runBranch, base, attemptBranch, dir string) (*Worktree, error) {
	if !isHash(base) {
		return nil, fmt.Errorf("add worktree: base %q is not a full commit hash", base)
	}
	return r.addAttempt(runBranch, attemptBranch, dir, AddOptions{NewRunBase: base})
}

func isHash(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// addAttempt makes the worktree; o.NewRunBase, when set, is the commit at
// which runBranch is created first.
func (r *Repo) addAttempt(runBranch, attemptBranch, dir string, o AddOptions) (*Worktree, error) {
	newRun := o.NewRunBase
	if err := checkBranch(runBranch); err != nil {
		return nil, err
	}
	if err := checkBranch(attemptBranch); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("worktree %s: %v", dir, err)
	}
	if entries, err := os.ReadDir(abs); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("worktree %s already exists and is not empty (fix: remove it, or use a new attempt directory)", abs)
	}
	if len(o.Sparse) > 0 {
		if err := CheckSparse(o.Sparse); err != nil {
			return nil, fmt.Errorf("add worktree: %v", err)
		}
		if !plainName(filepath.Base(abs)) {
			return nil, fmt.Errorf("add worktree %s: a sparse worktree's folder name must be plain (letters, digits, '.', '_', '-')", abs)
		}
	}
	head := newRun
	if newRun == "" {
		if head, err = r.Head(runBranch); err != nil {
			return nil, fmt.Errorf("add worktree: run %v", err)
		}
	}
	if _, ok, err := r.rd.ref("refs/heads/" + attemptBranch); err != nil {
		return nil, fmt.Errorf("add worktree: %v", err)
	} else if ok {
		return nil, fmt.Errorf("branch %s already exists in %s (fix: use the next attempt number, or delete the branch)", attemptBranch, r)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("add worktree: %v", err)
	}
	// The hash, not the branch name, is the start point, so BaseSHA is
	// exactly what was checked out even if the run branch moves meanwhile.
	var reused *reusedTree
	var reuseErr error
	plain := r.plainAdd && plainName(filepath.Base(abs)) && len(o.Sparse) == 0
	if plain || len(o.Sparse) > 0 {
		newRunBranch := ""
		if newRun != "" {
			newRunBranch = runBranch
		}
		// Only a plain worktree is reused: git's own add copies what a
		// sparse checkout or per-worktree config needs.
		if o.Pool != nil && plain {
			reused, reuseErr = r.prepareReuse(o.Pool, abs)
			// A tree the pool gave that could be neither cleaned nor
			// removed (a file made immutable while it waited, say) is
			// no folder to check out afresh into: what is left of it
			// would reach the step.
			if entries, err := os.ReadDir(abs); reused == nil && err == nil && len(entries) > 0 {
				why := "it is not empty"
				if reuseErr != nil {
					why = reuseErr.Error()
				}
				return nil, fmt.Errorf("add worktree %s: the tree taken from the pool %s could not be cleaned or removed (%s); fix: remove %s by hand (lsattr and chattr -i for immutable files)", abs, o.Pool.Dir(), why, abs)
			}
		}
		if err := r.addPlain(abs, attemptBranch, head, newRunBranch, reused, &reuseErr, o.Sparse); err != nil {
			return nil, fmt.Errorf("add worktree %s in %s: %v", abs, r, err)
		}
	} else {
		if newRun != "" {
			if err := r.createRef(runBranch, newRun, "kusaw: run branch of an attempt"); err != nil {
				return nil, err
			}
		}
		unlock := r.lockWorktrees()
		_, err = r.git.run(gitCmd{dir: r.workDir(), args: append(append([]string{}, indexConfig...), "worktree", "add", "--quiet", "-b", attemptBranch, "--", abs, head)})
		unlock()
		if err != nil {
			r.undoAdd(abs, attemptBranch, head)
			return nil, fmt.Errorf("add worktree %s in %s: %v", abs, r, err)
		}
	}
	gitDir, err := readGitFile(abs)
	if err == nil {
		err = r.checkAdminDir(gitDir)
	}
	if err != nil {
		r.undoAdd(abs, attemptBranch, head)
		return nil, fmt.Errorf("add worktree %s: %v", abs, err)
	}
	w := &Worktree{Repo: r.String(), Path: abs, Branch: attemptBranch, GitDir: gitDir, CommonDir: r.CommonDir, BaseSHA: head, Sparse: o.Sparse, repo: r}
	// A tree taken without a walk on an unchanged base keeps the held
	// index it came with: git wrote nothing, so it is the very index of
	// the checkout (a copy would be one more pass over every entry).
	keepHeld := reused != nil && reuseErr == nil && reused.trusted && reused.same && o.Pool != nil && plain
	if reused != nil {
		if !keepHeld {
			_ = os.Remove(reused.index)
		}
		if reuseErr == nil {
			w.Reused, w.Cleaned, w.Trusted = true, reused.report, reused.trusted
		}
	}
	if reuseErr != nil {
		w.ReuseFailed = reuseErr.Error()
	}
	if keepHeld {
		w.index, w.pool = reused.index, o.Pool
	} else if o.Pool != nil {
		// Before anything else touches the tree: include and setup run
		// next, the step after them. Only a plain worktree goes back to
		// the pool (only such a one is taken from it).
		w.keepIndex(o.Pool, plain)
		if reused != nil && reuseErr == nil && reused.same && reused.idx != nil && w.index != "" {
			w.parsed = reused.idx // the same bytes: no second parse
		}
	}
	return w, nil
}

// addPlain makes what `git worktree add -b branch -- abs head` makes, with
// two git processes instead of four (git's add runs branch, symbolic-ref
// and reset --hard as processes of their own): the branch, created only
// if it does not exist; the administrative folder <CommonDir>/worktrees/<x>
// with the files git reads there (gitdir, commondir, HEAD); the
// worktree's .git link; and the index and files, checked out by read-tree
// with the repository's own git folder named explicitly. The folder is
// marked locked while it is made, as git does, so a prune meanwhile
// leaves it alone.
//
// runBranch, when set, is created at head in the same update-ref
// transaction (both or neither), and stays if the worktree then fails.
//
// reused, when set, is a cleaned tree from the pool already at abs: head
// is checked out over it (checkoutReused); if that fails, *reuseErr says
// why and the tree is emptied and checked out afresh.
//
// sparse, when set, are the cone folders: the worktree's own patterns are
// written before the checkout, which then writes only them.
func (r *Repo) addPlain(abs, branch, head, runBranch string, reused *reusedTree, reuseErr *error, sparse []string) error {
	var stdin strings.Builder
	for _, b := range []string{runBranch, branch} {
		if b != "" {
			fmt.Fprintf(&stdin, "create refs/heads/%s %s\n", b, head)
		}
	}
	// The branches and the checkout are independent (read-tree is given
	// the commit, not HEAD): git makes both at once.
	refs := make(chan error, 1)
	go func() {
		_, err := r.git.run(gitCmd{dir: r.workDir(), stdin: strings.NewReader(stdin.String()), args: []string{"update-ref", "-m", "branch: Created from " + head, "--stdin"}})
		refs <- err
	}()
	admin, made, err := r.makeAdmin(abs, branch)
	if err == nil && len(sparse) > 0 {
		err = writeSparse(admin, sparse)
	}
	var rerr error
	if err == nil && reused != nil {
		rerr = r.checkoutReused(admin, abs, head, reused)
	}
	refErr := <-refs
	if rerr != nil {
		*reuseErr = fmt.Errorf("checking out over the reused tree: %v", rerr)
		if err = clearTree(abs); err == nil {
			err = os.Remove(filepath.Join(admin, "index"))
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		}
	}
	if err == nil && (reused == nil || rerr != nil) {
		env := []string{"GIT_DIR=" + admin, "GIT_WORK_TREE=" + abs}
		args := append([]string{}, indexConfig...)
		if len(sparse) > 0 {
			args = append(args, sparseConfig...)
		}
		_, err = r.git.run(gitCmd{dir: abs, env: env, args: append(args, "read-tree", "--reset", "-u", head)})
	}
	if err == nil && refErr == nil {
		return os.Remove(filepath.Join(admin, "locked"))
	}
	if admin != "" {
		_ = os.RemoveAll(admin)
	}
	if made {
		_ = os.RemoveAll(abs)
	}
	if refErr != nil {
		return refErr // the transaction made no branch: none to delete
	}
	_, _ = r.git.run(gitCmd{dir: r.workDir(), args: []string{"update-ref", "--no-deref", "-d", "refs/heads/" + branch, head}})
	return err
}

// makeAdmin registers worktree abs on branch: a new administrative folder
// named after abs (with a number added when taken, as git does) and the
// worktree's .git link. Paths are written resolved, as git writes them.
//
// made: abs is the new worktree's (a failure later leaves only its files
// there); false when abs could not be taken.
func (r *Repo) makeAdmin(abs, branch string) (admin string, made bool, err error) {
	unlock := r.lockWorktrees()
	defer unlock()
	if err := os.Mkdir(abs, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", false, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", false, err
	}
	// As git refuses: a registration whose folder is missing (a crash) is
	// pruned first.
	if r.isRegistered(abs) || r.isRegistered(real) {
		return "", false, fmt.Errorf("%s is already registered as a worktree (fix: git worktree prune)", abs)
	}
	made = true // what fails from here on leaves only this worktree's files
	base := filepath.Join(r.CommonDir, "worktrees")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", true, err
	}
	name := filepath.Base(abs)
	for i := 0; i < 1000 && admin == ""; i++ {
		p := filepath.Join(base, name)
		if i > 0 {
			p += strconv.Itoa(i)
		}
		if err := os.Mkdir(p, 0o755); err == nil {
			admin = p
		} else if !errors.Is(err, fs.ErrExist) {
			return "", true, err
		}
	}
	if admin == "" {
		return "", true, fmt.Errorf("no free name for a worktree folder under %s", base)
	}
	realAdmin, err := filepath.EvalSymlinks(admin)
	if err != nil {
		return admin, true, err
	}
	for _, f := range []struct{ path, body string }{
		{filepath.Join(admin, "locked"), "initializing\n"},
		{filepath.Join(admin, "commondir"), "../..\n"},
		{filepath.Join(admin, "HEAD"), "ref: refs/heads/" + branch + "\n"},
		{filepath.Join(admin, "gitdir"), filepath.Join(real, ".git") + "\n"},
		{filepath.Join(abs, ".git"), "gitdir: " + realAdmin + "\n"},
	} {
		if err := writeNew(f.path, f.body); err != nil {
			return admin, true, err
		}
	}
	return admin, true, nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path, body string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(body)
	return errors.Join(err, f.Close())
}

// plainName: a worktree folder name addPlain may use as is (git would
// change other names before using them).
func plainName(s string) bool {
	if s == "" || s[0] == '.' || s[0] == '-' || strings.HasSuffix(s, ".lock") {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// undoAdd removes what a failed AddAttempt may have left. The branch is
// deleted only while it still points at the start commit (AddAttempt checked
// that it did not exist before).
func (r *Repo) undoAdd(dir, branch, head string) {
	unlock := r.lockWorktrees()
	_, _ = r.git.run(gitCmd{dir: r.workDir(), args: []string{"worktree", "remove", "--force", "--force", "--", dir}})
	_, _ = r.git.run(gitCmd{dir: r.workDir(), args: []string{"worktree", "prune"}})
	unlock()
	_, _ = r.git.run(gitCmd{dir: r.workDir(), args: []string{"update-ref", "--no-deref", "-d", "refs/heads/" + branch, head}})
}

// readGitFile reads the "gitdir: ..." line git writes into a linked
// worktree's .git file.
func readGitFile(wt string) (string, error) {
	b, err := readRegular(filepath.Join(wt, ".git"), 4096)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	p, ok := strings.CutPrefix(s, "gitdir: ")
	if !ok {
		return "", fmt.Errorf("%s/.git is not a worktree link", wt)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(wt, p)
	}
	return filepath.Clean(p), nil
}

// checkAdminDir makes sure dir is one of this repository's worktree
// administrative directories: kusaw runs git there outside the sandbox and
// removes it on cleanup, so it must not be anything a record or a step could
// point elsewhere.
func (r *Repo) checkAdminDir(dir string) error {
	base := filepath.Join(r.CommonDir, "worktrees")
	rb, err1 := filepath.EvalSymlinks(base)
	rd, err2 := filepath.EvalSymlinks(dir)
	if err1 != nil || err2 != nil {
		rb, rd = filepath.Clean(base), filepath.Clean(dir)
	}
	rel, err := filepath.Rel(rb, rd)
	if err != nil || rel == "." || strings.Contains(rel, string(filepath.Separator)) || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s is not a worktree directory of %s", dir, r)
	}
	return nil
}

// CommitAll commits the worktree's whole content (untracked files included,
// ignored files excluded) on the attempt branch, with kusaw's git outside any
// sandbox. It returns the branch's resulting commit and whether the branch
// moved beyond BaseSHA, by this commit or by commits the step made itself.
//
// It trusts nothing the step could have changed: git is pointed at the
// worktree's administrative directory explicitly (not through the worktree's
// own .git file), a private index is built from the branch's commit (so a
// stale index.lock or a doctored index left by the step does not matter), and
// the commit is made with plumbing on top of the attempt branch's head, not
// HEAD, so a step that detached HEAD or switched branches still has its files
// committed on its attempt branch. No hook runs.
func (w *Worktree) CommitAll(msg string) (sha string, changed bool, err error) {
	r, err := w.openRepo()
	if err != nil {
		return "", false, err
	}
	if err := checkBranch(w.Branch); err != nil {
		return "", false, err
	}
	if err := r.checkAdminDir(w.GitDir); err != nil {
		return "", false, fmt.Errorf("commit: %v", err)
	}
	if st, err := os.Lstat(w.Path); err != nil || !st.IsDir() {
		return "", false, fmt.Errorf("commit: worktree %s is missing or not a directory", w.Path)
	}
	ref := "refs/heads/" + w.Branch
	tip, ok, err := r.ownRef(ref)
	if err != nil {
		return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
	}
	parent, oldValue := tip, tip
	if !ok {
		// The step deleted its own branch: recreate it from the base so its
		// files are still kept.
		if w.BaseSHA == "" {
			return "", false, fmt.Errorf("commit: branch %s no longer exists and the worktree's base commit is unknown", w.Branch)
		}
		parent, oldValue = w.BaseSHA, ""
	}
	if msg == "" {
		msg = "kusaw: attempt " + w.Branch
	}

	if sv := w.layerSurvey; sv != nil && ok && tip == w.BaseSHA && len(w.MergeParents) == 0 && len(sv.changed)+len(sv.untracked) == 0 {
		// The write layer says the step changed nothing, and the branch
		// is still the base: nothing to commit, no index to make.
		w.survey = sv
		return tip, false, nil
	}
	tmp, err := os.MkdirTemp("", "kusaw-index-")
	if err != nil {
		return "", false, fmt.Errorf("commit: %v", err)
	}
	defer os.RemoveAll(tmp)
	index := filepath.Join(tmp, "index")
	// The repository's own git folder, not the worktree's private one: a
	// step could write the latter (git opens files such as logs/HEAD and
	// locked there), and nothing of it is needed to commit a tree.
	env := []string{"GIT_DIR=" + r.CommonDir, "GIT_WORK_TREE=" + w.Path, "GIT_INDEX_FILE=" + index}
	run := func(args ...string) (string, error) {
		out, err := r.git.run(gitCmd{dir: w.Path, env: env, args: append(append([]string{}, indexConfig...), args...)})
		return strings.TrimSpace(string(out)), err
	}
	if err := w.startIndex(index, parent, run); err != nil {
		return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
	}
	// A write layer's survey holds whatever the commit does: it is what
	// the step changed in the tree, which Release reverts.
	w.survey = w.layerSurvey
	tree, same := "", false // same: the survey proved the tree is parent's
	if parent == w.BaseSHA && len(w.Sparse) == 0 {
		tree, same, err = w.addSurveyed(env)
		if err != nil {
			// Whatever stopped it, git's own full pass decides.
			tree = ""
			if err := os.Remove(index); err != nil {
				return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
			}
			if err := w.startIndex(index, parent, run); err != nil {
				return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
			}
		}
	}
	if tree == "" && !same {
		fullAdds.Add(1)
		if err := w.addAll(run); err != nil {
			return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
		}
		if len(w.Sparse) > 0 {
			if err := w.keepOutsideCone(r, env); err != nil {
				return "", false, fmt.Errorf("commit on %s: keep what is outside the sparse folders: %v", w.Branch, err)
			}
		}
		if tree, err = run("write-tree"); err != nil {
			return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
		}
	}
	parentTree := ""
	if !same || len(w.MergeParents) > 0 {
		if parentTree, err = r.rd.treeOf(parent); err != nil {
			return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
		}
		if same {
			tree = parentTree
		}
	}
	result := parent
	if tree != parentTree || len(w.MergeParents) > 0 {
		ident, err := r.identityArgs(env, w.Path)
		if err != nil {
			return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
		}
		args := append(ident, "commit-tree", tree, "-p", parent)
		for _, mp := range w.MergeParents {
			args = append(args, "-p", mp)
		}
		out, err := r.git.run(gitCmd{dir: w.Path, env: env, stdin: strings.NewReader(msg), args: args})
		if err != nil {
			return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
		}
		result = strings.TrimSpace(string(out))
	}
	if result != tip {
		if _, err := run("update-ref", "--no-deref", "-m", "kusaw: commit attempt", ref, result, oldValue); err != nil {
			return "", false, fmt.Errorf("commit on %s: %v", w.Branch, err)
		}
	}
	w.syncIndex(index)
	if w.BaseSHA == "" {
		return result, tree != parentTree, nil
	}
	return result, result != w.BaseSHA, nil
}

// addAll is CommitAll's git add --all. As the step's own user (not root,
// which reads whatever the mode), git skips a folder it cannot open with
// a warning and exit 0, and fails on a file it cannot read: the step's
// folders get their owner's r+x back first, and, only when git add
// fails, its files their owner's read, once (Release resets modes).
func (w *Worktree) addAll(run func(args ...string) (string, error)) error {
	if os.Geteuid() == 0 {
		_, err := run("add", "--all")
		return err
	}
	if err := readableTree(w.Path, false); err != nil {
		return err
	}
	if _, err := run("add", "--all"); err == nil {
		return nil
	}
	if err := readableTree(w.Path, true); err != nil {
		return err
	}
	_, err := run("add", "--all")
	return err
}

// fullAdds counts CommitAll's passes of git add --all (tests tell the
// survey's way from it).
var fullAdds atomic.Int64

// maxSurveyed is how many paths the commit gives git by name: git
// matches each of its index entries against each name, so beyond this a
// full pass of git add is cheaper.
const maxSurveyed = 500

// addSurveyed stages what a survey of the tree against the trusted index
// finds (the step's changes, and no more: every other path is proved to
// be kusaw's checkout, which is the index's) and writes the tree: git
// reads only those files, not all of them. The index must be the trusted
// index's copy (the commit's parent is the worktree's base). What git
// check-ignore, with the tree's .gitignore files as the step left them,
// calls ignored is what git add --all leaves out: such a path the index
// does not name is not staged, and one it names is only updated (git add
// -u: naming it to git add --all would stop at the ignored folder it is
// in). What the survey found is kept for Release. An error: the caller's
// git add --all is to decide instead.
func (w *Worktree) addSurveyed(env []string) (tree string, same bool, err error) {
	sv := w.layerSurvey
	if sv == nil {
		idx, err := w.trusted()
		if err != nil {
			return "", false, err
		}
		if _, _, sv, err = cleanTree(w.Path, idx, cleanSurvey); err != nil {
			return "", false, err
		}
		w.survey = sv
	}
	n := len(sv.changed) + len(sv.untracked)
	if n == 0 {
		return "", true, nil // the base's checkout, untouched
	}
	if n > maxSurveyed {
		return "", false, fmt.Errorf("%d paths changed", n)
	}
	ignored, err := w.ignored(env, append(append([]string{}, sv.changed...), sv.untracked...))
	if err != nil {
		return "", false, err
	}
	var update, add []string
	for _, p := range sv.changed {
		if ignored[p] {
			update = append(update, p)
		} else {
			add = append(add, p)
		}
	}
	for _, p := range sv.untracked {
		if !ignored[p] {
			add = append(add, p)
		}
	}
	// Literal names: a file called ':(glob)*' is that file.
	env = append(env[:len(env):len(env)], "GIT_LITERAL_PATHSPECS=1")
	git := func(paths []string, args ...string) (string, error) {
		c := gitCmd{dir: w.Path, env: env, args: append(append([]string{}, indexConfig...), args...)}
		if paths != nil {
			c.stdin = strings.NewReader(strings.Join(paths, "\x00") + "\x00")
			c.args = append(c.args, "--pathspec-from-file=-", "--pathspec-file-nul")
		}
		out, err := w.repo.git.run(c)
		return strings.TrimSpace(string(out)), err
	}
	if len(update) > 0 {
		if _, err := git(update, "add", "--update"); err != nil {
			return "", false, err
		}
	}
	for _, p := range add {
		if err := readableFolders(filepath.Join(w.Path, p)); err != nil {
			return "", false, err
		}
	}
	if len(add) > 0 {
		if _, err := git(add, "add", "--all"); err != nil {
			return "", false, err
		}
	}
	tree, err = git(nil, "write-tree")
	return tree, false, err
}

// ignored tells which of paths (the tree's) git ignores. check-ignore
// takes no literal names: each is given as ./path, which git reads as a
// path whatever its first character (':' would start pathspec magic) and
// prints back as given. --no-index: a path the index names is ignored
// too if a pattern matches it.
func (w *Worktree) ignored(env []string, paths []string) (map[string]bool, error) {
	var in strings.Builder
	for _, p := range paths {
		in.WriteString("./" + p + "\x00")
	}
	out, err := w.repo.git.run(gitCmd{dir: w.Path, env: env, stdin: strings.NewReader(in.String()), args: append(append([]string{}, indexConfig...), "check-ignore", "--no-index", "-z", "--stdin")})
	if err != nil && exitCodeOf(err) != 1 { // 1: none is ignored
		return nil, err
	}
	ignored := map[string]bool{}
	for _, p := range bytes.Split(out, []byte{0}) {
		if q, ok := bytes.CutPrefix(p, []byte("./")); ok {
			ignored[string(q)] = true
		} else if len(p) > 0 {
			return nil, fmt.Errorf("git check-ignore answered %q, not a path it was given", p)
		}
	}
	return ignored, nil
}

// startIndex makes the private index the commit starts from: parent's
// tree. From the trusted index of the worktree's checkout when kusaw has
// one, so add hashes only the files whose stat data changed since (ctime
// included: a step cannot forge it); when the step committed itself, a
// two-way read-tree from the base keeps that stat data for every path its
// commits left alone. Otherwise a bare read-tree of parent, and add hashes
// every file.
func (w *Worktree) startIndex(index, parent string, run func(args ...string) (string, error)) error {
	if w.index != "" && copyIndex(w.index, index) == nil {
		if parent == w.BaseSHA {
			return nil
		}
		if _, err := run("read-tree", "-i", "-m", w.BaseSHA, parent); err == nil {
			return nil
		}
		_ = os.Remove(index)
	}
	_, err := run("read-tree", parent)
	return err
}

// syncIndex puts the private index in place as the worktree's own when the
// worktree's HEAD is the attempt branch, so `git status` there is clean
// afterwards. It is a convenience for people who look at a kept worktree;
// nothing depends on it, so failures are ignored.
func (w *Worktree) syncIndex(index string) {
	if len(w.Sparse) > 0 {
		return // the private index has no skip-worktree bits: git status would list every file outside the cone as deleted
	}
	head, err := readRegular(filepath.Join(w.GitDir, "HEAD"), maxRefSize+256)
	if err != nil || strings.TrimSpace(string(head)) != "ref: refs/heads/"+w.Branch {
		return
	}
	// rename replaces whatever the step left at index (a link is replaced,
	// never followed).
	_ = os.Rename(index, filepath.Join(w.GitDir, "index"))
}

// identityArgs supplies kusaw's own identity for whichever of user.name and
// user.email the repository (and the user's global config) does not set.
func (r *Repo) identityArgs(env []string, dir string) ([]string, error) {
	out, err := r.git.run(gitCmd{dir: dir, env: env, args: []string{"config", "-z", "--get-regexp", `^user\.(name|email)$`}})
	if err != nil && exitCodeOf(err) != 1 { // 1: no such key
		return nil, err
	}
	have := map[string]bool{}
	for _, kv := range bytes.Split(out, []byte{0}) {
		k, v, _ := bytes.Cut(kv, []byte{'\n'})
		if len(bytes.TrimSpace(v)) > 0 {
			have[string(k)] = true
		}
	}
	var args []string
	if !have["user.name"] {
		args = append(args, "-c", "user.name=kusaw")
	}
	if !have["user.email"] {
		args = append(args, "-c", "user.email=kusaw@localhost")
	}
	return args, nil
}

func (w *Worktree) openRepo() (*Repo, error) {
	if w.repo != nil {
		return w.repo, nil
	}
	r, err := OpenRepo(w.Repo)
	if err != nil {
		return nil, err
	}
	w.repo = r
	return r, nil
}

// RemoveWorktree removes an attempt's worktree (whatever the step left in
// it) and its administrative directory, then prunes. The branch stays.
func (r *Repo) RemoveWorktree(w *Worktree) error {
	if w.Path == "" && w.GitDir == "" {
		return errors.New("remove worktree: neither its path nor its git directory is known")
	}
	abs := ""
	if w.Path != "" {
		var err error
		if abs, err = filepath.Abs(w.Path); err != nil {
			return fmt.Errorf("remove worktree %q: %v", w.Path, err)
		}
	}
	if abs != "" && abs == r.Path || abs == filepath.Dir(r.CommonDir) || abs == r.CommonDir {
		return fmt.Errorf("remove worktree %s: that is the repository's main checkout, not an attempt worktree", abs)
	}
	if w.GitDir != "" {
		if err := r.checkAdminDir(w.GitDir); err != nil {
			return fmt.Errorf("remove worktree: %v", err)
		}
	}
	unlock := r.lockWorktrees()
	defer unlock()
	var errs []error
	needPrune := true
	if _, err := os.Lstat(abs); abs != "" && err == nil {
		_, gerr := r.git.run(gitCmd{dir: r.workDir(), args: []string{"worktree", "remove", "--force", "--force", "--", abs}})
		// git's remove deletes the registration too; prune is then only
		// needed if something was left.
		needPrune = gerr != nil || (w.GitDir != "" && exists(w.GitDir))
		if gerr != nil {
			// git refuses some worktrees (submodules inside, files the step
			// made unwritable). Remove the files directly; prune then drops
			// the registration whose directory is gone.
			// Only a directory registered as one of this repository's
			// worktrees is removed by hand; a wrong record must not delete
			// anything else.
			if !r.isRegistered(abs) {
				return fmt.Errorf("remove worktree %s: it is not a worktree of %s (%v)", abs, r, gerr)
			}
			if err := forceRemoveAll(abs); err != nil {
				errs = append(errs, fmt.Errorf("remove worktree %s: %v (after %v)", abs, err, gerr))
			}
		}
	}
	if needPrune {
		if err := r.prune(); err != nil {
			errs = append(errs, err)
		}
	}
	// A locked worktree survives prune; its directory is gone by now, so its
	// registration is kusaw's to drop.
	if w.GitDir != "" {
		if _, err := os.Lstat(w.GitDir); err == nil {
			if err := forceRemoveAll(w.GitDir); err != nil {
				errs = append(errs, fmt.Errorf("remove worktree registration %s: %v", w.GitDir, err))
			}
		}
	}
	return errors.Join(errs...)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func (r *Repo) isRegistered(dir string) bool {
	all, err := r.listWorktrees()
	if err != nil {
		return false
	}
	for _, w := range all {
		if w.GitDir != "" && w.Path == dir {
			return true
		}
	}
	return false
}

// Prune drops the registrations of worktrees whose directories are gone
// (after a crash, or a state directory removed by hand).
func (r *Repo) Prune() error {
	unlock := r.lockWorktrees()
	defer unlock()
	return r.prune()
}

func (r *Repo) prune() error {
	if _, err := r.git.run(gitCmd{dir: r.workDir(), args: []string{"worktree", "prune"}}); err != nil {
		return fmt.Errorf("prune worktrees of %s: %v", r, err)
	}
	return nil
}

// ListKusawWorktrees returns the worktrees of this repository that are on a
// kusaw branch, including ones whose directory is gone, so a restart after a
// crash can find and remove what the interrupted attempts left.
func (r *Repo) ListKusawWorktrees() ([]*Worktree, error) {
	all, err := r.listWorktrees()
	if err != nil {
		return nil, err
	}
	var out []*Worktree
	for _, w := range all {
		if w.GitDir != "" && IsKusawBranch(w.Branch) {
			out = append(out, w)
		}
	}
	return out, nil
}

// listWorktrees reads the main checkout's HEAD and each administrative
// directory under <CommonDir>/worktrees (the same files `git worktree list`
// reads), without starting a process.
func (r *Repo) listWorktrees() ([]*Worktree, error) {
	var out []*Worktree
	if !r.Bare {
		out = append(out, &Worktree{Repo: r.String(), Path: filepath.Dir(r.CommonDir), Branch: headBranch(r.CommonDir), CommonDir: r.CommonDir, repo: r})
	}
	base := filepath.Join(r.CommonDir, "worktrees")
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list worktrees of %s: %v", r, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		admin := filepath.Join(base, e.Name())
		w := &Worktree{Repo: r.String(), GitDir: admin, CommonDir: r.CommonDir, Branch: headBranch(admin), repo: r}
		if b, err := readRegular(filepath.Join(admin, "gitdir"), 4096); err == nil {
			w.Path = filepath.Dir(strings.TrimSpace(string(b)))
		}
		out = append(out, w)
	}
	return out, nil
}

// headBranch returns the branch a HEAD file names, or "" when detached.
func headBranch(gitDir string) string {
	b, err := readRegular(filepath.Join(gitDir, "HEAD"), maxRefSize+256)
	if err != nil {
		return ""
	}
	ref, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "ref: refs/heads/")
	if !ok {
		return ""
	}
	return ref
}
