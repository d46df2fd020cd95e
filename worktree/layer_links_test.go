//go:build linux

package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// layerAttempt takes a worktree of the layer repository for one test.
func layerAttempt(t *testing.T) (w *Worktree, dir, c1, state string) {
	t.Helper()
	isolateHome(t)
	needOverlay(t)
	dir, c1, _, _ = layerRepo(t)
	state = t.TempDir()
	r := open(t, dir)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 1), filepath.Join(state, "1", "app"), AddOptions{Pool: r.Pool(state)})
	if err != nil {
		t.Fatal(err)
	}
	return w, dir, c1, state
}

// inodeIn says which paths of the tree are inode ino.
func inodeIn(t *testing.T, root string, ino uint64) []string {
	t.Helper()
	var found []string
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Ino == ino && st.Mode&unix.S_IFMT == unix.S_IFREG {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// A file of the upper that is a hard link to a file outside it (one of
// the host on the same filesystem, one of the tree underneath, or one the
// step linked within the layer with a further link outside) would be that
// file once moved into the tree: the commit would read it, the next step
// write it. The upper is the step's to forge (plant): the apply refuses
// it, and leaves no name of that file in the tree. Twin: a hard link the
// step makes through the overlay between files of the tree (both copied
// up into the layer) is applied and committed as git add -A would.
func TestLayerRefusesForeignHardLinks(t *testing.T) {
	cases := []struct {
		name   string
		script string
		plant  func(t *testing.T, upper, tree, state string) string // the foreign file
	}{
		{"link to a file of the host", `echo mine > mine.txt`, func(t *testing.T, upper, _, state string) string {
			host := filepath.Join(state, "host-secret")
			write(t, host, "secret\n")
			if err := os.Link(host, filepath.Join(upper, "stolen.txt")); err != nil {
				t.Fatal(err)
			}
			return host
		}},
		{"link to a file of the tree underneath", `echo mine > mine.txt`, func(t *testing.T, upper, tree, _ string) string {
			if err := os.MkdirAll(filepath.Join(upper, "src"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(filepath.Join(tree, "README"), filepath.Join(upper, "src", "alias")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(tree, "README")
		}},
		{"links made in the layer and one more outside it", `ln README src/hard`, func(t *testing.T, upper, _, state string) string {
			keep := filepath.Join(state, "kept-outside")
			if err := os.Link(filepath.Join(upper, "README"), keep); err != nil {
				t.Fatal(err)
			}
			return keep
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, _, _, state := layerAttempt(t)
			layer := inOverlay(t, w, c.script)
			foreign := c.plant(t, filepath.Join(layer, "upper"), w.Path, state)
			var fst unix.Stat_t
			if err := unix.Lstat(foreign, &fst); err != nil {
				t.Fatal(err)
			}
			err := w.ApplyLayer(layer)
			if err == nil || !strings.Contains(err.Error(), "hard link to a file outside the write layer") {
				t.Fatalf("the apply of a foreign hard link: %v", err)
			}
			if w.Layered() {
				t.Error("a refused apply left a layer survey (the commit would take the tree for the step's work)")
			}
			if got := inodeIn(t, w.Path, fst.Ino); len(got) > 0 && !(len(got) == 1 && got[0] == foreign) {
				t.Errorf("the tree holds the foreign file under %v", got)
			}
			t.Logf("refused: %v", err)
		})
	}
	t.Run("twin: link between files of the tree", func(t *testing.T) {
		w, dir, _, _ := layerAttempt(t)
		layer := inOverlay(t, w, `ln README src/hard && echo more >> src/hard`)
		if err := w.ApplyLayer(layer); err != nil {
			t.Fatal(err)
		}
		sha, changed, err := w.CommitAll("m")
		if err != nil || !changed {
			t.Fatalf("commit: %v %v", changed, err)
		}
		readme := tgit(t, dir, "show", sha+":README")
		if hard := tgit(t, dir, "show", sha+":src/hard"); hard != readme || !strings.HasSuffix(readme, "more") {
			t.Errorf("committed README %q, src/hard %q: want both the linked file with the step's line", readme, hard)
		}
	})
}
