package worktree

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Sparse worktrees (repos.NAME.sparse, docs/factory.md "Sparse
// worktrees"): an attempt's tree holds only the listed folders, as git's
// sparse-checkout cone mode has them (every file of a listed folder, the
// files at the top and those directly in the folders leading to one), and
// its commit changes nothing outside them. The patterns are the
// worktree's own (<admin>/info/sparse-checkout) and kusaw's git is told
// to apply them by -c options: the repository's config is never changed
// (git sparse-checkout would turn on extensions.worktreeConfig for every
// checkout of it).
//
// Sparse trees do not join the pool: their checkout already costs what
// the cone weighs, and the pool's trusted index refuses skip-worktree
// entries (a step could set the bit to hide a file from the cleaning);
// trusting them for sparse trees only would be a second rule to get
// right for little gain.

// CheckSparse: folders are cone folders: clean relative paths inside the
// repository, no glob or pattern characters, no .git component.
func CheckSparse(folders []string) error {
	if len(folders) == 0 {
		return fmt.Errorf("sparse lists no folder")
	}
	for _, f := range folders {
		if f == "" || f != strings.TrimSpace(f) || strings.ContainsAny(f, "*?[]\\!#\n\r\x00") || path.IsAbs(f) {
			return fmt.Errorf("sparse folder %q is not a plain folder path inside the repository", f)
		}
		c := strings.TrimSuffix(f, "/")
		if path.Clean(c) != c || !validIndexPath(c) {
			return fmt.Errorf("sparse folder %q is not a folder inside the repository", f)
		}
	}
	return nil
}

// coneFolders cleans and sorts folders, dropping those inside another.
func coneFolders(folders []string) []string {
	var all []string
	for _, f := range folders {
		all = append(all, path.Clean(strings.TrimSuffix(f, "/")))
	}
	sort.Strings(all)
	var out []string
	for _, f := range all {
		if len(out) > 0 && (f == out[len(out)-1] || strings.HasPrefix(f, out[len(out)-1]+"/")) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// sparsePatterns is the cone-mode sparse-checkout file for folders, as git
// sparse-checkout set --cone writes it.
func sparsePatterns(folders []string) string {
	cone := coneFolders(folders)
	full := map[string]bool{}
	for _, f := range cone {
		full[f] = true
	}
	parents := map[string]bool{}
	for _, f := range cone {
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			parents[d] = true
		}
	}
	var ps []string
	for p := range parents {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	var b strings.Builder
	b.WriteString("/*\n!/*/\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "/%s/\n!/%s/*/\n", p, p)
	}
	for _, f := range cone {
		fmt.Fprintf(&b, "/%s/\n", f)
	}
	return b.String()
}

// inCone: the tracked path p is one a cone-mode checkout of folders
// writes (and so one a step of the attempt may change).
func inCone(cone []string, p string) bool {
	dir := path.Dir(p)
	if dir == "." {
		return true // the top's files
	}
	for _, f := range cone {
		if strings.HasPrefix(p, f+"/") || f == dir || strings.HasPrefix(f, dir+"/") {
			return true
		}
	}
	return false
}

// sparseConfig makes kusaw's git apply the worktree's sparse patterns.
var sparseConfig = []string{"-c", "core.sparseCheckout=true", "-c", "core.sparseCheckoutCone=true"}

// writeSparse writes the worktree's patterns into its administrative folder.
func writeSparse(admin string, folders []string) error {
	if err := os.MkdirAll(filepath.Join(admin, "info"), 0o755); err != nil {
		return err
	}
	return writeNew(filepath.Join(admin, "info", "sparse-checkout"), sparsePatterns(folders))
}

// keepOutsideCone puts every path of the private index outside the cone
// back as it is in base: what the step changed, added or deleted there
// (in its files or by its own commits) is not committed. git lists only
// what differs from base, so this costs what changed.
func (w *Worktree) keepOutsideCone(r *Repo, env []string) error {
	if !isHash(w.BaseSHA) {
		return fmt.Errorf("the sparse worktree's base commit is unknown")
	}
	cone := coneFolders(w.Sparse)
	out, err := r.git.run(gitCmd{dir: w.Path, env: env, args: []string{"diff-index", "--cached", "-r", "-z", "--no-renames", w.BaseSHA}})
	if err != nil {
		return err
	}
	drop, restore, _ := outsideCone(out, cone)
	for _, in := range [][]byte{drop, restore} {
		if len(in) == 0 {
			continue
		}
		if _, err := r.git.run(gitCmd{dir: w.Path, env: env, stdin: bytes.NewReader(in), args: []string{"update-index", "-z", "--index-info"}}); err != nil {
			return err
		}
	}
	return nil
}
