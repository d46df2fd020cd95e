package worktree

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// outsideCone reads git's raw diff records (diff-index or diff-tree -r -z
// --no-renames, base on the left) and returns the index-info input that
// puts every path outside cone back as it is in base: drop removes each
// such path, restore then writes base's entry (a path may have turned
// from a file into a folder, or back). paths are those put back.
func outsideCone(raw []byte, cone []string) (drop, restore []byte, paths []string) {
	var d, r bytes.Buffer
	// Records: ":oldmode newmode oldsha newsha status\0path\0".
	fields := bytes.Split(raw, []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		meta, p := strings.Fields(strings.TrimPrefix(string(fields[i]), ":")), string(fields[i+1])
		if len(meta) < 5 || inCone(cone, p) {
			continue
		}
		oldMode, oldSHA := meta[0], meta[2]
		fmt.Fprintf(&d, "0 %s\t%s\x00", strings.Repeat("0", len(oldSHA)), p)
		if oldMode != "000000" {
			fmt.Fprintf(&r, "%s %s\t%s\x00", oldMode, oldSHA, p)
		}
		paths = append(paths, p)
	}
	return d.Bytes(), r.Bytes(), paths
}

// KeepOutsideCone is CommitAll's rule for a sparse worktree applied to a
// commit made elsewhere (a cluster worker's: it checks out whole trees,
// and a worker's commits are not trusted to keep the rule): when head
// changes a path outside folders' cone relative to base, it returns a new
// commit on top of head whose tree is head's with every such path as it
// is in base, and the paths it put back. head itself, and no path, when
// nothing outside changed. Nothing in the repository's checkout or refs
// changes (a private index, plumbing only).
func (r *Repo) KeepOutsideCone(base, head string, folders []string) (string, []string, error) {
	if err := CheckSparse(folders); err != nil {
		return "", nil, err
	}
	if !isHash(base) || !isHash(head) {
		return "", nil, fmt.Errorf("keep outside the sparse folders: %q or %q is not a commit hash", base, head)
	}
	cone := coneFolders(folders)
	raw, err := r.git.run(gitCmd{dir: r.workDir(), args: []string{"diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", base, head}})
	if err != nil {
		return "", nil, fmt.Errorf("keep outside the sparse folders: %v", err)
	}
	drop, restore, paths := outsideCone(raw, cone)
	if len(paths) == 0 {
		return head, nil, nil
	}
	tmp, err := os.MkdirTemp("", "kusaw-index-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(tmp)
	env := []string{"GIT_DIR=" + r.CommonDir, "GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}
	run := func(stdin []byte, args ...string) (string, error) {
		out, err := r.git.run(gitCmd{dir: r.workDir(), env: env, stdin: bytes.NewReader(stdin), args: append(append([]string{}, indexConfig...), args...)})
		return strings.TrimSpace(string(out)), err
	}
	if _, err := run(nil, "read-tree", head); err != nil {
		return "", nil, fmt.Errorf("keep outside the sparse folders: %v", err)
	}
	for _, in := range [][]byte{drop, restore} {
		if len(in) == 0 {
			continue
		}
		if _, err := run(in, "update-index", "-z", "--index-info"); err != nil {
			return "", nil, fmt.Errorf("keep outside the sparse folders: %v", err)
		}
	}
	tree, err := run(nil, "write-tree")
	if err != nil {
		return "", nil, fmt.Errorf("keep outside the sparse folders: %v", err)
	}
	msg := fmt.Sprintf("kusaw: keep what is outside the sparse folders (%s) as in %s\n", strings.Join(cone, ", "), short(base))
	sha, err := r.commitTree(tree, []string{head}, msg)
	if err != nil {
		return "", nil, err
	}
	return sha, paths, nil
}
