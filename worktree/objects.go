package worktree

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// ImportObjects brings into the repository the objects the attempt branch's
// head needs that a sandboxed step wrote only to its private object folder
// objDir (the sandbox's GIT_OBJECT_DIRECTORY; the repository's own objects/
// are read-only there). Call it after the step and before CommitAll.
//
// Nothing is copied as a file: git packs the objects with objDir as an
// alternate for reading, and index-pack --strict, run in the repository
// without that alternate, re-hashes and checks every object it receives. An
// object whose content does not match its name therefore never gets in
// under that name, and the import fails. A final walk of the head's objects
// in the repository alone proves nothing is missing.
//
// On failure the branch is put back at BaseSHA (when known), so no branch
// of the repository names a commit it does not hold, and the error says so.
func (w *Worktree) ImportObjects(objDir string) error {
	if objDir == "" {
		return nil
	}
	r, err := w.openRepo()
	if err != nil {
		return err
	}
	if err := checkBranch(w.Branch); err != nil {
		return err
	}
	ref := "refs/heads/" + w.Branch
	tip, ok, err := r.ownRef(ref)
	if err != nil || !ok {
		// No branch (or one kusaw refuses, which CheckOwnRef handles):
		// CommitAll recreates it from the base.
		return nil
	}
	if err := w.importTip(r, objDir, tip); err != nil {
		msg := err.Error()
		if w.BaseSHA != "" {
			if _, err := r.git.run(gitCmd{dir: r.workDir(), env: []string{"GIT_DIR=" + r.CommonDir}, args: []string{"update-ref", "--no-deref", "-m", "kusaw: objects of the step's commits failed the import", ref, w.BaseSHA, tip}}); err == nil {
				msg += fmt.Sprintf("; the branch was put back at its base %s", short(w.BaseSHA))
			}
		}
		return fmt.Errorf("%s (fix: the step left objects whose content does not match their names, or commits with missing objects; its files are committed on top of the base)", msg)
	}
	return nil
}

// importTip brings the objects commit tip needs from objDir into the
// repository, re-hashing each (see ImportObjects). It moves no ref.
func (w *Worktree) importTip(r *Repo, objDir, tip string) error {
	repoEnv := []string{"GIT_DIR=" + r.CommonDir}
	if _, err := r.git.run(gitCmd{dir: r.workDir(), env: repoEnv, args: []string{"cat-file", "-e", tip + "^{commit}"}}); err == nil {
		// The step made no commit of its own (or it is already here): the
		// repository's objects/ were read-only to it, so what is there came
		// from git outside.
		return nil
	}
	fail := func(why string) error {
		return fmt.Errorf("import the objects of branch %s (commit %s) from the step's private object folder %s: %s", w.Branch, short(tip), objDir, why)
	}
	if objDir == "" {
		return fail("the step made commits but had no private object folder")
	}
	if st, err := os.Lstat(objDir); err != nil || !st.IsDir() {
		return fail("the folder is missing")
	}
	// What the repository already has: the base, or every branch and tag
	// outside kusaw's (whose heads may name commits of other attempts'
	// private folders).
	revs := tip + "\n"
	if w.BaseSHA != "" {
		revs += "^" + w.BaseSHA + "\n"
	} else {
		out, err := r.git.run(gitCmd{dir: r.workDir(), env: repoEnv, args: []string{"for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags"}})
		if err != nil {
			return fail(err.Error())
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			sha, name, _ := strings.Cut(l, " ")
			if sha != "" && !strings.HasPrefix(name, "refs/heads/"+branchPrefix) {
				revs += "^" + sha + "\n"
			}
		}
	}
	altEnv := append(append([]string{}, repoEnv...), "GIT_ALTERNATE_OBJECT_DIRECTORIES="+quoteAlt(objDir))
	pack, err := r.git.run(gitCmd{dir: r.workDir(), env: altEnv, stdin: strings.NewReader(revs),
		args: []string{"pack-objects", "--revs", "--stdout", "-q"}})
	if err != nil {
		return fail(err.Error())
	}
	if _, err := r.git.run(gitCmd{dir: r.workDir(), env: repoEnv, stdin: bytes.NewReader(pack),
		args: []string{"index-pack", "--stdin", "--strict"}}); err != nil {
		return fail(err.Error())
	}
	// Everything the head needs is now in the repository itself.
	walk := []string{"rev-list", "--objects", "--quiet", tip}
	if w.BaseSHA != "" {
		walk = append(walk, "^"+w.BaseSHA)
	}
	if _, err := r.git.run(gitCmd{dir: r.workDir(), env: repoEnv, args: walk}); err != nil {
		return fail(err.Error())
	}
	return nil
}

// quoteAlt quotes a folder for GIT_ALTERNATE_OBJECT_DIRECTORIES, which git
// splits at ':' and reads C-quoted when an entry starts with '"'.
func quoteAlt(d string) string {
	if !strings.ContainsAny(d, ":\"\\\n") {
		return d
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(d) + `"`
}
