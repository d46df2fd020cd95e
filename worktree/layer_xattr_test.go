//go:build linux

package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// setxattrHelper: the test binary run by a step's script as
// "$KUSAW_TEST_BIN" __setxattr PATH NAME VALUE (the overlay's scripts
// have no setfattr).
func init() {
	if len(os.Args) == 5 && os.Args[1] == "__setxattr" {
		if err := unix.Setxattr(os.Args[2], os.Args[3], []byte(os.Args[4]), 0); err != nil {
			os.Stderr.WriteString("setxattr " + os.Args[2] + " " + os.Args[3] + ": " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// overlayXattrsOn lists the overlay's own attributes (any user.overlay.
// or trusted.overlay. one, escaped or not) on path.
func overlayXattrsOn(path string) []string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(path, buf)
	if err != nil || n == 0 {
		return nil
	}
	var out []string
	for _, x := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if strings.HasPrefix(x, "user.overlay.") || strings.HasPrefix(x, "trusted.overlay.") {
			out = append(out, x)
		}
	}
	return out
}

// A step sets the overlay's own attributes on files and folders through
// its layer (Linux 6.7 on stores them escaped, user.overlay.overlay.*:
// the step's, not the overlay's). They carry no meaning for the tree:
// the apply strips them, nothing of them reaches the tree, the folder
// marked "opaque" keeps what it held, and the attempt goes on (before,
// a file's escaped attribute failed the apply). Twin: the step's change
// and its own user.kusaw.* attribute are applied; an unescaped overlay
// attribute with a meaning kusaw cannot honour (metacopy: the data left
// underneath), which no step can set, still fails the apply.
func TestLayerStripsOverlayXattrsAStepSets(t *testing.T) {
	w, dir, _, _ := layerAttempt(t)
	script := `X() { env -u KUSAW_TEST_OVERLAY_TREE "$KUSAW_TEST_BIN" __setxattr "$@"; }
		echo changed >> README
		X README user.overlay.opaque y
		X README user.overlay.redirect /etc
		X README user.overlay.metacopy x
		X README user.overlay.overlay.whiteout y
		X src/a.go user.overlay.whiteout y
		X src user.overlay.opaque y
		X src/a.go user.kusaw.note ok`
	layer := inOverlay(t, w, script, "KUSAW_TEST_BIN="+os.Args[0])
	upper := filepath.Join(layer, "upper")
	got := overlayXattrsOn(filepath.Join(upper, "README"))
	if len(got) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the overlay refused the step's overlay attributes (before Linux 6.7): nothing to strip, CI's kernel must store them escaped")
		}
		t.Skipf("the overlay refused the step's overlay attributes (before Linux 6.7): nothing to strip here")
	}
	t.Logf("in the upper: README %v, src/a.go %v, src %v", got, overlayXattrsOn(filepath.Join(upper, "src", "a.go")), overlayXattrsOn(filepath.Join(upper, "src")))
	if err := w.ApplyLayer(layer); err != nil {
		t.Fatalf("the apply of the step's own overlay attributes: %v", err)
	}
	for _, p := range []string{"README", "src", "src/a.go"} {
		if x := overlayXattrsOn(filepath.Join(w.Path, p)); len(x) > 0 {
			t.Errorf("%s in the tree carries %v", p, x)
		}
	}
	if b := make([]byte, 16); true {
		if n, err := unix.Lgetxattr(filepath.Join(w.Path, "src", "a.go"), "user.kusaw.note", b); err != nil || string(b[:n]) != "ok" {
			t.Errorf("the step's own attribute on src/a.go: %q %v", b[:max(n, 0)], err)
		}
	}
	sha, changed, err := w.CommitAll("m")
	if err != nil || !changed {
		t.Fatalf("commit: %v %v", changed, err)
	}
	if files := tgit(t, dir, "ls-tree", "-r", "--name-only", sha); !strings.Contains(files, "src/deep/b.go") || !strings.Contains(files, "src/a.go") {
		t.Errorf("the folder marked opaque lost what it held:\n%s", files)
	}
	if readme := tgit(t, dir, "show", sha+":README"); !strings.HasSuffix(readme, "changed") {
		t.Errorf("README committed as %q", readme)
	}

	// The overlay's own metacopy mark (as no step can set it): refused.
	w2, _, _, _ := layerAttempt(t)
	layer = inOverlay(t, w2, `echo changed >> README`)
	if err := unix.Lsetxattr(filepath.Join(layer, "upper", "README"), "user.overlay.metacopy", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := w2.ApplyLayer(layer); err == nil || !strings.Contains(err.Error(), "user.overlay.metacopy") {
		t.Fatalf("the apply of a metacopy file: %v", err)
	}
}
