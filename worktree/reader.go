package worktree

import (
	"errors"
	"fmt"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// reader answers read-only questions about a repository. go-git does the
// work in-process; when go-git cannot open a repository (it refuses some
// repository extensions git itself handles, such as worktreeConfig, which
// `git sparse-checkout` turns on, or reftable), the git binary answers
// instead, so such repositories still work.
type reader interface {
	name() string
	// resolve turns a revision (branch, tag, commit, HEAD~1 ...) into the
	// full hash of the commit it names.
	resolve(rev string) (string, error)
	// ref returns the commit a full ref name points at; ok is false when the
	// ref does not exist.
	ref(name string) (sha string, ok bool, err error)
	treeOf(commit string) (string, error)
	isAncestor(ancestor, descendant string) (bool, error)
	diff(from, to string) (patch, stat string, err error)
}

var errNoRevision = errors.New("no such revision")

// goGitReader opens the repository afresh for every question: the git binary
// (and the steps) add objects and packs between questions, and a fresh open
// costs a config read, while a stale one can miss new packs.
type goGitReader struct{ path string }

func (g goGitReader) name() string { return "go-git" }

func (g goGitReader) open() (*git.Repository, error) {
	return git.PlainOpenWithOptions(g.path, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
}

func (g goGitReader) resolve(rev string) (string, error) {
	repo, err := g.open()
	if err != nil {
		return "", err
	}
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", errNoRevision
	}
	// ResolveRevision peels annotated tags; make sure the result is a commit
	// (a tag may point at a tree or blob).
	if _, err := repo.CommitObject(*h); err != nil {
		if t, terr := repo.TagObject(*h); terr == nil {
			c, cerr := t.Commit()
			if cerr != nil {
				return "", errNoRevision
			}
			return c.Hash.String(), nil
		}
		return "", errNoRevision
	}
	return h.String(), nil
}

func (g goGitReader) ref(name string) (string, bool, error) {
	repo, err := g.open()
	if err != nil {
		return "", false, err
	}
	r, err := repo.Reference(plumbing.ReferenceName(name), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return r.Hash().String(), true, nil
}

func (g goGitReader) treeOf(commit string) (string, error) {
	repo, err := g.open()
	if err != nil {
		return "", err
	}
	c, err := repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", commit, err)
	}
	return c.TreeHash.String(), nil
}

func (g goGitReader) isAncestor(a, d string) (bool, error) {
	repo, err := g.open()
	if err != nil {
		return false, err
	}
	ca, err := repo.CommitObject(plumbing.NewHash(a))
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", a, err)
	}
	cd, err := repo.CommitObject(plumbing.NewHash(d))
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", d, err)
	}
	return ca.IsAncestor(cd)
}

func (g goGitReader) diff(from, to string) (string, string, error) {
	repo, err := g.open()
	if err != nil {
		return "", "", err
	}
	cf, err := repo.CommitObject(plumbing.NewHash(from))
	if err != nil {
		return "", "", fmt.Errorf("commit %s: %w", from, err)
	}
	ct, err := repo.CommitObject(plumbing.NewHash(to))
	if err != nil {
		return "", "", fmt.Errorf("commit %s: %w", to, err)
	}
	p, err := cf.Patch(ct)
	if err != nil {
		return "", "", err
	}
	return p.String(), formatStat(p.Stats()), nil
}

// formatStat renders per-file counts the way `git diff --stat` does, closely
// enough for a person to read.
func formatStat(st object.FileStats) string {
	if len(st) == 0 {
		return ""
	}
	width := 0
	for _, f := range st {
		width = max(width, len(f.Name))
	}
	var b strings.Builder
	adds, dels := 0, 0
	for _, f := range st {
		adds += f.Addition
		dels += f.Deletion
		bar := strings.Repeat("+", min(f.Addition, 40)) + strings.Repeat("-", min(f.Deletion, 40))
		fmt.Fprintf(&b, " %-*s | %d %s\n", width, f.Name, f.Addition+f.Deletion, bar)
	}
	fmt.Fprintf(&b, " %d file%s changed, %d insertion%s(+), %d deletion%s(-)\n",
		len(st), plural(len(st)), adds, plural(adds), dels, plural(dels))
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// binReader asks the git binary.
type binReader struct {
	g   *gitRunner
	dir string
}

func (b binReader) name() string { return "git" }

func (b binReader) git(args ...string) (string, error) {
	out, err := b.g.run(gitCmd{dir: b.dir, args: args})
	return strings.TrimSpace(string(out)), err
}

func (b binReader) resolve(rev string) (string, error) {
	out, err := b.git("rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil || out == "" {
		return "", errNoRevision
	}
	return out, nil
}

func (b binReader) ref(name string) (string, bool, error) {
	out, err := b.git("rev-parse", "--verify", "--quiet", "--end-of-options", name+"^{commit}")
	if err != nil {
		if exitCodeOf(err) == 1 {
			return "", false, nil
		}
		return "", false, err
	}
	return out, true, nil
}

func (b binReader) treeOf(commit string) (string, error) {
	return b.git("rev-parse", "--verify", "--end-of-options", commit+"^{tree}")
}

func (b binReader) isAncestor(a, d string) (bool, error) {
	_, err := b.git("merge-base", "--is-ancestor", a, d)
	if err == nil {
		return true, nil
	}
	if exitCodeOf(err) == 1 {
		return false, nil
	}
	return false, err
}

func (b binReader) diff(from, to string) (string, string, error) {
	// --no-ext-diff and --no-textconv: no program named by config runs.
	base := []string{"diff", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames"}
	patch, err := b.g.run(gitCmd{dir: b.dir, args: append(append([]string{}, base...), from, to, "--")})
	if err != nil {
		return "", "", err
	}
	stat, err := b.g.run(gitCmd{dir: b.dir, args: append(append([]string{}, base...), "--stat", from, to, "--")})
	if err != nil {
		return "", "", err
	}
	return string(patch), string(stat), nil
}
