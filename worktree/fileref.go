package worktree

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// fileRef reads a branch's ref as git's files backend keeps it, without a
// git process: the loose file under the git folder, else its line in
// packed-refs (the order git reads them in, so a pack-refs in between
// cannot hide it). done is false when git must answer: another ref
// storage (reftable), a name outside refs/heads/ or one git would refuse,
// a loose file that is not one object id in a regular file (a symbolic
// ref, a link), a packed-refs line it does not know. Like go-git's reader
// it does not peel: a branch names a commit.
func fileRef(common, name string) (sha string, ok, done bool) {
	branch, isBranch := strings.CutPrefix(name, "refs/heads/")
	if !isBranch || common == "" || !plainBranchName(branch) {
		return "", false, false
	}
	if _, err := os.Lstat(filepath.Join(common, "reftable")); !errors.Is(err, fs.ErrNotExist) {
		return "", false, false
	}
	sha, ok, err := readRefFile(refPath(common, name))
	switch {
	case err != nil:
		return "", false, false
	case ok:
		return sha, true, true
	}
	return packedRef(filepath.Join(common, "packed-refs"), name)
}

// plainBranchName: components git accepts (checkComponent), so the name is
// a path below refs/heads/ and nothing else.
func plainBranchName(b string) bool {
	for _, c := range strings.Split(b, "/") {
		if checkComponent("", c) != nil {
			return false
		}
	}
	return true
}

// maxPackedRefs bounds what fileRef reads of packed-refs; a larger file is
// left to git.
const maxPackedRefs = 8 << 20

// packedRef looks name up in a packed-refs file: "<oid> <name>" lines, each
// perhaps followed by "^<oid>" (the tag's peeled object), after a "#"
// header.
func packedRef(path, name string) (sha string, ok, done bool) {
	b, err := readRegular(path, maxPackedRefs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, true
	}
	if err != nil {
		return "", false, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxPackedRefs)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		oid, n, cut := strings.Cut(line, " ")
		if !cut || !oidForm().MatchString(oid) {
			return "", false, false
		}
		if n == name {
			return oid, true, true
		}
	}
	if sc.Err() != nil {
		return "", false, false
	}
	return "", false, true
}
