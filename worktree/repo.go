package worktree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Repo is one local git repository a factory works on. Its methods are safe
// for concurrent use: git serialises ref and index updates with its own lock
// files, and every go-git read opens its own handle.
type Repo struct {
	// Path is the top level of the checkout that was opened (empty for a
	// bare repository).
	Path string
	// CommonDir is the repository's git directory shared by all its
	// worktrees (the main checkout's .git).
	CommonDir string
	Bare      bool

	git *gitRunner
	rd  reader
	// readerNote says why go-git is not used, when it is not.
	readerNote string
	// plainAdd: attempt worktrees are made without `git worktree add`
	// (addPlain); configFacts says when they cannot be.
	plainAdd bool
}

// OpenRepo opens the git repository at path (the checkout's top level or a
// directory inside it).
func OpenRepo(path string) (*Repo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %v", path, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("repository %s does not exist (fix: point the repo's path at an existing git checkout)", abs)
		}
		return nil, fmt.Errorf("repository %s: %v", abs, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("repository %s is not a directory (fix: point the repo's path at a git checkout)", abs)
	}
	g, err := newGitRunner()
	if err != nil {
		return nil, err
	}
	if r := cachedOpen(abs, g, inoOf(st)); r != nil {
		return r, nil
	}
	start := time.Now()
	// One process in the common case; --show-toplevel fails in a bare
	// repository, which is then asked again without it.
	out, err := g.run(gitCmd{dir: abs, args: []string{"rev-parse", "--is-bare-repository", "--absolute-git-dir", "--git-common-dir", "--show-toplevel"}})
	if err != nil && !strings.Contains(err.Error(), "not a git repository") {
		out, err = g.run(gitCmd{dir: abs, args: []string{"rev-parse", "--is-bare-repository", "--absolute-git-dir", "--git-common-dir"}})
	}
	if err != nil {
		if strings.Contains(err.Error(), "not a git repository") {
			return nil, fmt.Errorf("%s is not a git repository (fix: run `git init` there, or point the repo's path at a git checkout)", abs)
		}
		return nil, fmt.Errorf("repository %s: %v", abs, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 3 {
		return nil, fmt.Errorf("repository %s: unexpected answer from git rev-parse: %q", abs, out)
	}
	r := &Repo{Bare: lines[0] == "true", git: g}
	common := lines[2]
	if !filepath.IsAbs(common) {
		common = filepath.Join(abs, common)
	}
	r.CommonDir = filepath.Clean(common)
	if !r.Bare {
		if len(lines) != 4 {
			return nil, fmt.Errorf("repository %s: git did not name the checkout's top level", abs)
		}
		r.Path = lines[3]
	}
	var files []string
	g.guard, r.plainAdd, files = g.configFacts(r.workDir())
	rd, why := goGitReaderFor(r.workDir())
	if rd != nil {
		r.rd = rd
	} else {
		r.rd = binReader{g: g, dir: r.workDir(), common: r.CommonDir}
		if why != nil {
			r.readerNote = why.Error()
		}
	}
	keepOpen(abs, r, files, start, inoOf(st))
	return r, nil
}

// workDir is where kusaw runs git for repository-wide commands.
func (r *Repo) workDir() string {
	if r.Bare {
		return r.CommonDir
	}
	return r.Path
}

// ReadBackend names what reads refs, commits and diffs ("go-git" or "git")
// and, for "git", why go-git is not used.
func (r *Repo) ReadBackend() (name, note string) { return r.rd.name(), r.readerNote }

func (r *Repo) String() string {
	if r.Bare {
		return r.CommonDir
	}
	return r.Path
}

// Dirty reports whether the main checkout has uncommitted changes to tracked
// files (staged or not). Untracked files do not count: kusaw branches from
// commits and never reads or writes the main checkout, and a state directory
// kept inside the checkout would otherwise make every repo look dirty.
func (r *Repo) Dirty() (bool, error) {
	paths, err := r.DirtyPaths()
	return len(paths) > 0, err
}

// DirtyPaths lists the tracked paths with uncommitted changes in the main
// checkout, for a message that names them.
func (r *Repo) DirtyPaths() ([]string, error) {
	if r.Bare {
		return nil, nil
	}
	out, err := r.git.run(gitCmd{dir: r.Path, args: []string{"status", "--porcelain=v1", "-z", "--untracked-files=no"}})
	if err != nil {
		return nil, fmt.Errorf("repository %s: %v", r, err)
	}
	var paths []string
	recs := bytes.Split(out, []byte{0})
	for i := 0; i < len(recs); i++ {
		rec := recs[i]
		if len(rec) < 4 {
			continue
		}
		paths = append(paths, string(rec[3:]))
		// A rename or copy is followed by its source path.
		if rec[0] == 'R' || rec[0] == 'C' {
			i++
		}
	}
	return paths, nil
}

// ResolveBase turns a branch, tag or commit (or "" for HEAD) into the full
// hash of the commit a run starts from.
func (r *Repo) ResolveBase(base string) (string, error) {
	rev := base
	if rev == "" {
		rev = "HEAD"
	}
	if strings.HasPrefix(rev, "-") {
		return "", fmt.Errorf("base %q is not a branch, tag or commit (fix: set the repo's base to an existing branch, tag or commit)", base)
	}
	sha, err := r.rd.resolve(rev)
	if err == nil {
		return sha, nil
	}
	if rev == "HEAD" {
		if _, ok, _ := r.rd.ref("HEAD"); !ok {
			return "", fmt.Errorf("repository %s has no commits yet (fix: make a first commit, or set the repo's base)", r)
		}
	}
	return "", fmt.Errorf("base %q is not a branch, tag or commit in %s (fix: set the repo's base to an existing branch, tag or commit)", base, r)
}

// HasCommit reports whether the repository holds commit sha (a full
// hash): in-process when go-git reads the repository, else one git
// process.
func (r *Repo) HasCommit(sha string) bool {
	if !isHash(sha) {
		return false
	}
	got, err := r.rd.resolve(sha)
	return err == nil && got == sha
}

// Head returns the commit a branch (without refs/heads/) points at.
func (r *Repo) Head(branch string) (string, error) {
	sha, ok, err := r.rd.ref("refs/heads/" + branch)
	if err != nil {
		return "", fmt.Errorf("repository %s: branch %s: %v", r, branch, err)
	}
	if !ok {
		return "", fmt.Errorf("branch %s does not exist in %s", branch, r)
	}
	return sha, nil
}

// CreateRunBranch creates the run's branch kusaw/<run-id> at base and returns
// its name and commit. It refuses to reuse an existing branch.
func (r *Repo) CreateRunBranch(runID, base string) (branch, sha string, err error) {
	if err := checkRunID(runID); err != nil {
		return "", "", err
	}
	sha, err = r.ResolveBase(base)
	if err != nil {
		return "", "", err
	}
	branch = RunBranch(runID)
	if err := r.createRef(branch, sha, "kusaw: run "+runID); err != nil {
		return "", "", err
	}
	return branch, sha, nil
}

// createRef creates refs/heads/<branch> at sha, failing if it exists.
func (r *Repo) createRef(branch, sha, reason string) error {
	if _, ok, err := r.rd.ref("refs/heads/" + branch); err != nil {
		return fmt.Errorf("repository %s: %v", r, err)
	} else if ok {
		return fmt.Errorf("branch %s already exists in %s (fix: use a new run id, or delete the branch)", branch, r)
	}
	// An empty old value makes git refuse if the ref appeared meanwhile.
	_, err := r.git.run(gitCmd{dir: r.workDir(), args: []string{"update-ref", "--no-deref", "-m", reason, "refs/heads/" + branch, sha, ""}})
	if err != nil {
		return fmt.Errorf("create branch %s in %s: %v", branch, r, err)
	}
	return nil
}

// AdvanceBranch fast-forwards a kusaw branch (the run branch) to toSHA. It
// refuses anything that is not a fast-forward, so a step that rewrote its
// attempt branch's history cannot rewrite the run's.
func (r *Repo) AdvanceBranch(branch, toSHA string) error {
	if err := checkBranch(branch); err != nil {
		return err
	}
	to, err := r.rd.resolve(toSHA)
	if err != nil {
		return fmt.Errorf("advance %s: %q is not a commit in %s", branch, toSHA, r)
	}
	cur, err := r.Head(branch)
	if err != nil {
		return fmt.Errorf("advance %s: %v", branch, err)
	}
	if cur == to {
		return nil
	}
	ok, err := r.rd.isAncestor(cur, to)
	if err != nil {
		return fmt.Errorf("advance %s: %v", branch, err)
	}
	if !ok {
		return fmt.Errorf("advance %s: not a fast-forward (the branch is at %s, which %s does not contain)", branch, short(cur), short(to))
	}
	wts, err := r.listWorktrees()
	if err != nil {
		return fmt.Errorf("advance %s: %v", branch, err)
	}
	for _, w := range wts {
		if w.Branch == branch {
			return fmt.Errorf("advance %s: the branch is checked out at %s; kusaw does not move a checked-out branch (fix: switch that checkout to another branch)", branch, w.Path)
		}
	}
	_, err = r.git.run(gitCmd{dir: r.workDir(), args: []string{"update-ref", "--no-deref", "-m", "kusaw: advance to " + short(to), "refs/heads/" + branch, to, cur}})
	if err != nil {
		return fmt.Errorf("advance %s in %s: %v", branch, r, err)
	}
	return nil
}

// Diff returns the patch and a --stat style summary between two commits
// (hashes or any revision).
func (r *Repo) Diff(fromSHA, toSHA string) (patch, stat string, err error) {
	from, err := r.rd.resolve(fromSHA)
	if err != nil {
		return "", "", fmt.Errorf("diff: %q is not a commit in %s", fromSHA, r)
	}
	to, err := r.rd.resolve(toSHA)
	if err != nil {
		return "", "", fmt.Errorf("diff: %q is not a commit in %s", toSHA, r)
	}
	patch, stat, err = r.rd.diff(from, to)
	if err != nil {
		return "", "", fmt.Errorf("diff %s..%s in %s: %v", short(from), short(to), r, err)
	}
	return patch, stat, nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
