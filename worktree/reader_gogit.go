//go:build !kusaw_nogogit

package worktree

import (
	"errors"
	"fmt"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// goGitReaderFor is the in-process reader of the repository at path, or
// why there is none.
func goGitReaderFor(path string) (reader, error) {
	g := goGitReader{path: path}
	if _, err := g.open(); err != nil {
		return nil, fmt.Errorf("go-git cannot open it (%v); reading with the git binary", err)
	}
	return g, nil
}

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
