package worktree

import (
	"errors"
	"strings"
)

// reader answers read-only questions about a repository. go-git does the
// work in-process; when go-git cannot open a repository (it refuses some
// repository extensions git itself handles, such as worktreeConfig, which
// `git sparse-checkout` turns on, or reftable), the git binary answers
// instead, so such repositories still work. A program built with the tag
// kusaw_nogogit (the kusaw CLI: make build) links no go-git and always
// asks the git binary (reader_nogogit.go).
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

// binReader asks the git binary; a branch's ref it reads from the files
// git keeps it in when it can (fileRef).
type binReader struct {
	g      *gitRunner
	dir    string
	common string // the git folder shared by the worktrees, for fileRef
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
	if sha, ok, done := fileRef(b.common, name); done {
		return sha, ok, nil
	}
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
