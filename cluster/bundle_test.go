package cluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func commitFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	gitT(t, dir, "add", name)
	gitT(t, dir, "commit", "-q", "-m", name)
	return gitT(t, dir, "rev-parse", "HEAD")
}

// A bundle carries a commit to a repo that has none of it, then only the
// increment; refs of neither repo move.
func TestBundleRoundTrip(t *testing.T) {
	ctx := context.Background()
	src, dst := t.TempDir(), t.TempDir()
	gitT(t, src, "init", "-q")
	gitT(t, dst, "init", "-q", "--bare")
	c1 := commitFile(t, src, "a.txt", "one")
	b := filepath.Join(t.TempDir(), "b1")
	if _, err := MakeBundle(ctx, src, b, c1, nil); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", dst, "bundle", "verify", b).CombinedOutput(); err != nil {
		t.Fatalf("git does not read kusaw's bundle: %v\n%s", err, out)
	}
	tip, err := ImportBundle(ctx, dst, b)
	if err != nil || tip != c1 {
		t.Fatalf("import: %s %v", tip, err)
	}
	c2 := commitFile(t, src, "b.txt", "two")
	inc := filepath.Join(t.TempDir(), "b2")
	full := filepath.Join(t.TempDir(), "b3")
	n1, err := MakeBundle(ctx, src, inc, c2, []string{c1})
	if err != nil {
		t.Fatal(err)
	}
	n2, _ := MakeBundle(ctx, src, full, c2, nil)
	if n1 >= n2 {
		t.Errorf("the increment (%d bytes) is not smaller than the full bundle (%d)", n1, n2)
	}
	if tip, err := ImportBundle(ctx, dst, inc); err != nil || tip != c2 {
		t.Fatalf("increment: %s %v", tip, err)
	}
	if refs := gitT(t, dst, "for-each-ref"); refs != "" {
		t.Errorf("import moved refs: %s", refs)
	}
	// A repo without the prerequisite refuses the increment.
	empty := t.TempDir()
	gitT(t, empty, "init", "-q", "--bare")
	if _, err := ImportBundle(ctx, empty, inc); err == nil || !strings.Contains(err.Error(), "needs commit") {
		t.Fatalf("increment without its base: %v", err)
	}
}

// Attacker's side: a bundle whose object bytes were changed in transit (a
// worker returning code that is not what it claims) is refused by
// index-pack --strict; its twin, unchanged, imports.
func TestBundleTamperedRefused(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	gitT(t, src, "init", "-q")
	c := commitFile(t, src, "a.txt", strings.Repeat("payload ", 200))
	b := filepath.Join(t.TempDir(), "b")
	if _, err := MakeBundle(ctx, src, b, c, nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(b)
	// The tip names a commit the pack does not hold.
	forged := bytes.Replace(raw, []byte(c), []byte(strings.Repeat("1", 40)), 1)
	// Flip a byte inside the pack's compressed data.
	flipped := append([]byte{}, raw...)
	flipped[len(flipped)-40] ^= 0xff
	for name, data := range map[string][]byte{"forged tip": forged, "flipped byte": flipped} {
		dst := t.TempDir()
		gitT(t, dst, "init", "-q", "--bare")
		p := filepath.Join(t.TempDir(), "x")
		os.WriteFile(p, data, 0o600)
		if _, err := ImportBundle(ctx, dst, p); err == nil {
			t.Errorf("%s: a tampered bundle was imported", name)
		}
	}
	dst := t.TempDir()
	gitT(t, dst, "init", "-q", "--bare")
	if tip, err := ImportBundle(ctx, dst, b); err != nil || tip != c {
		t.Fatalf("the untouched bundle: %s %v", tip, err)
	}
}

// MakeBundle asks one rev-list when every commit it is given is known,
// and sorts them out only when not: a commit the receiver holds that this
// repo never saw is left out of the bundle's prerequisites, a tip that is
// not a commit (a tree, an unknown name) is refused, and a tip the
// receiver's commits already reach makes a bundle that imports.
func TestMakeBundleCommitsSortedOut(t *testing.T) {
	ctx := context.Background()
	src, dst := t.TempDir(), t.TempDir()
	gitT(t, src, "init", "-q")
	gitT(t, dst, "init", "-q", "--bare")
	c1 := commitFile(t, src, "a.txt", "one")
	c2 := commitFile(t, src, "b.txt", "two")
	unknown := strings.Repeat("1", 40)
	full := filepath.Join(t.TempDir(), "full")
	if _, err := MakeBundle(ctx, src, full, c1, []string{unknown}); err != nil {
		t.Fatalf("a held commit this repo does not know: %v", err)
	}
	if tip, err := ImportBundle(ctx, dst, full); err != nil || tip != c1 {
		t.Fatalf("import of the bundle made against an unknown commit: %s %v", tip, err)
	}
	inc := filepath.Join(t.TempDir(), "inc")
	if _, err := MakeBundle(ctx, src, inc, c2, []string{unknown, c1}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(inc)
	if head := string(b[:bytes.Index(b, []byte("\n\n"))]); !strings.Contains(head, "-"+c1) || strings.Contains(head, unknown) {
		t.Errorf("prerequisites: want %s only, header:\n%s", c1, head)
	}
	if tip, err := ImportBundle(ctx, dst, inc); err != nil || tip != c2 {
		t.Fatalf("increment: %s %v", tip, err)
	}
	tree := gitT(t, src, "rev-parse", c2+"^{tree}")
	for _, bad := range []string{tree, unknown, "HEAD"} {
		if _, err := MakeBundle(ctx, src, filepath.Join(t.TempDir(), "x"), bad, []string{c1}); err == nil || !strings.Contains(err.Error(), "is not a commit") {
			t.Errorf("tip %s: %v, want it refused as not a commit", bad, err)
		}
	}
	reached := filepath.Join(t.TempDir(), "reached")
	if _, err := MakeBundle(ctx, src, reached, c1, []string{c2}); err != nil {
		t.Fatalf("a tip the receiver's commits reach: %v", err)
	}
	if tip, err := ImportBundle(ctx, dst, reached); err != nil || tip != c1 {
		t.Fatalf("import of a bundle of a reached tip: %s %v", tip, err)
	}
}

// The tip is found as a commit in the checked pack's index without a git
// process; a header that names another object of the pack (a tree, a
// blob) or one it lacks is refused, and the twin naming the commit imports.
func TestImportBundleTipFromPackIndex(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	gitT(t, src, "init", "-q")
	c1 := commitFile(t, src, "a.txt", "one")
	b := filepath.Join(t.TempDir(), "b")
	if _, err := MakeBundle(ctx, src, b, c1, nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(b)
	tree := gitT(t, src, "rev-parse", c1+"^{tree}")
	blob := gitT(t, src, "rev-parse", c1+":a.txt")
	for _, tc := range []struct {
		name, tip string
		ok        bool
	}{{"the commit", c1, true}, {"its tree", tree, false}, {"its blob", blob, false}, {"absent", strings.Repeat("2", 40), false}} {
		dst := t.TempDir()
		gitT(t, dst, "init", "-q", "--bare")
		p := filepath.Join(t.TempDir(), "x")
		os.WriteFile(p, bytes.Replace(raw, []byte(c1+" "+bundleRef), []byte(tc.tip+" "+bundleRef), 1), 0o600)
		tip, err := ImportBundle(ctx, dst, p)
		if tc.ok && (err != nil || tip != c1) {
			t.Errorf("%s: %s %v", tc.name, tip, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "is not in its pack")) {
			t.Errorf("%s named as the tip: %s %v, want it refused", tc.name, tip, err)
		}
	}
	// The index read directly: the commit is one, its tree is not.
	dir := t.TempDir()
	pack := filepath.Join(dir, "p.pack")
	os.WriteFile(pack, raw[bytes.Index(raw, []byte("\n\n"))+2:], 0o600)
	gitT(t, src, "index-pack", "-o", filepath.Join(dir, "p.idx"), pack)
	if !packHasCommit(filepath.Join(dir, "p.idx"), pack, c1) || packHasCommit(filepath.Join(dir, "p.idx"), pack, tree) {
		t.Errorf("packHasCommit: commit %v, tree %v", packHasCommit(filepath.Join(dir, "p.idx"), pack, c1), packHasCommit(filepath.Join(dir, "p.idx"), pack, tree))
	}
}
