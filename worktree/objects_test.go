package worktree

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stepGit runs git in the worktree as a sandboxed step does: new objects go
// to the private folder, the repository's own are read as an alternate.
func stepGit(t *testing.T, w *Worktree, objDir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=step", "-c", "user.email=step@example.test"}, args...)...)
	cmd.Dir = w.Path
	env := []string{"LC_ALL=C", "GIT_OBJECT_DIRECTORY=" + objDir, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + filepath.Join(w.CommonDir, "objects")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("step git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// stepAttempt is an attempt whose step committed inside with a private
// object folder; it returns the worktree, the folder and the step's commit.
func stepAttempt(t *testing.T) (*Repo, *Worktree, string, string) {
	isolateHome(t)
	dir := newRepo(t)
	r := open(t, dir)
	run, _, err := r.CreateRunBranch("r1", "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.AddAttempt(run, AttemptBranch("r1", "build", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	objDir := filepath.Join(t.TempDir(), "objects")
	if err := os.Mkdir(objDir, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "made-inside.txt"), "step content\n")
	stepGit(t, w, objDir, "add", "made-inside.txt")
	stepGit(t, w, objDir, "commit", "-q", "-m", "step commit")
	c := stepGit(t, w, objDir, "rev-parse", "HEAD")
	if _, err := tgitErr(dir, "cat-file", "-e", c); err == nil {
		t.Fatal("the step's commit is already in the repository: the test proves nothing")
	}
	return r, w, objDir, c
}

func TestImportObjectsKeepsStepCommits(t *testing.T) {
	_, w, objDir, c := stepAttempt(t)
	if err := w.ImportObjects(objDir); err != nil {
		t.Fatal(err)
	}
	if out, err := tgitErr(w.Repo, "fsck", "--no-dangling", "--connectivity-only"); err != nil {
		t.Fatalf("fsck after import: %v\n%s", err, out)
	}
	write(t, filepath.Join(w.Path, "after.txt"), "outside\n")
	sha, changed, err := w.CommitAll("kusaw commit")
	if err != nil || !changed {
		t.Fatal(err, changed)
	}
	if p := tgit(t, w.Repo, "rev-parse", sha+"^"); p != c {
		t.Errorf("kusaw's commit has parent %s, want the step's %s", p, c)
	}
	if got := tgit(t, w.Repo, "show", sha+":made-inside.txt"); got != "step content" {
		t.Errorf("made-inside.txt: %q", got)
	}
	// Nothing to do a second time.
	if err := w.ImportObjects(objDir); err != nil {
		t.Errorf("second import: %v", err)
	}
}

func TestImportObjectsRefusesForgedObject(t *testing.T) {
	_, w, objDir, c := stepAttempt(t)
	// The step's blob is replaced by other content under the same name.
	cmd := exec.Command("git", "rev-parse", c+":made-inside.txt")
	cmd.Dir = w.Path
	cmd.Env = append(os.Environ(), "GIT_ALTERNATE_OBJECT_DIRECTORIES="+objDir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	oid := strings.TrimSpace(string(out))
	p := filepath.Join(objDir, oid[:2], oid[2:])
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the step's blob is not loose in the private folder: %v", err)
	}
	forged := "forged content\n"
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	fmt.Fprintf(zw, "blob %d\x00%s", len(forged), forged)
	zw.Close()
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, buf.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}

	err = w.ImportObjects(objDir)
	if err == nil {
		t.Fatal("a forged object was imported")
	}
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), "import the objects of branch") || !strings.Contains(err.Error(), "put back at its base") {
		t.Errorf("unclear error: %v", err)
	}
	if _, err := tgitErr(w.Repo, "cat-file", "-e", oid); err == nil {
		t.Error("the forged object's name is in the repository")
	}
	if got := tgit(t, w.Repo, "rev-parse", "refs/heads/"+w.Branch); got != w.BaseSHA {
		t.Errorf("branch at %s after a failed import, want the base %s", got, w.BaseSHA)
	}
	// (Reflogs still name the step's commit; they expire like any other.)
	if out, err := tgitErr(w.Repo, "fsck", "--no-dangling", "--no-reflogs", "--connectivity-only"); err != nil {
		t.Errorf("the repository is broken after a refused import: %v\n%s", err, out)
	}
	// The files are still kept, on top of the base.
	sha, _, err := w.CommitAll("kusaw commit")
	if err != nil {
		t.Fatal(err)
	}
	if got := tgit(t, w.Repo, "show", sha+":made-inside.txt"); got != "step content" {
		t.Errorf("made-inside.txt after a refused import: %q", got)
	}
}

// A worktree listed after a restart has no BaseSHA: the repository's own
// branches and tags, not kusaw's, tell what it already has.
func TestImportObjectsWithoutBase(t *testing.T) {
	_, w, objDir, c := stepAttempt(t)
	w.BaseSHA = ""
	if err := w.ImportObjects(objDir); err != nil {
		t.Fatal(err)
	}
	if _, err := tgitErr(w.Repo, "cat-file", "-e", c+":made-inside.txt"); err != nil {
		t.Errorf("the step's blob was not imported: %v", err)
	}
}
