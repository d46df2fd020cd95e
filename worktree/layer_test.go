//go:build linux

package worktree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The write layer's tests make a real upper layer: the tree mounted as an
// overlay inside bwrap (a user namespace holding CAP_SYS_ADMIN, as the
// sandbox's mount stage does), a shell script run in it as a step would.
// The test binary itself mounts the overlay (overlayHelper, below).

func init() {
	if tree := os.Getenv("KUSAW_TEST_OVERLAY_TREE"); tree != "" {
		overlayHelper(tree, os.Getenv("KUSAW_TEST_OVERLAY_LAYER"), os.Getenv("KUSAW_TEST_OVERLAY_SCRIPT"))
	}
}

// overlayHelper runs in bwrap: it mounts tree as an overlay (lower: the
// tree, upper and work: the layer's) and runs script in it.
func overlayHelper(tree, layer, script string) {
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work,userxattr", tree, layer, layer)
	if err := unix.Mount("overlay", tree, "overlay", 0, opts); err != nil {
		fmt.Fprintf(os.Stderr, "mount overlay on %s: %v\n", tree, err)
		os.Exit(97)
	}
	if err := os.Chdir(tree); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(97)
	}
	err := syscall.Exec("/bin/sh", []string{"sh", "-ec", script}, os.Environ())
	fmt.Fprintf(os.Stderr, "exec sh: %v\n", err)
	os.Exit(97)
}

// needOverlay skips (fails under CI=true) where bwrap cannot give the
// overlay mount the tests need; it returns bwrap's path.
func needOverlay(t testing.TB) string {
	t.Helper()
	bwrap, err := overlayProbe()
	if err != nil {
		msg := fmt.Sprintf("no overlay in a bwrap user namespace here (%v): install bubblewrap 0.8+ on a kernel with unprivileged overlay mounts (5.11+)", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bwrap
}

var overlayProbe = sync.OnceValues(func() (string, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return "", err
	}
	probe, err := os.MkdirTemp("", "kusaw-overlay-probe-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(probe)
	for _, d := range []string{"t", "l/upper", "l/work"} {
		os.MkdirAll(filepath.Join(probe, d), 0o755)
	}
	if out, err := overlayCmd(bwrap, filepath.Join(probe, "t"), filepath.Join(probe, "l"), "true", nil).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return bwrap, nil
})

func overlayCmd(bwrap, tree, layer, script string, env []string) *exec.Cmd {
	cmd := exec.Command(bwrap, "--unshare-user", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--bind", layer, layer, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_DAC_OVERRIDE", "--", os.Args[0])
	cmd.Env = append(append(os.Environ(), "KUSAW_TEST_OVERLAY_TREE="+tree, "KUSAW_TEST_OVERLAY_LAYER="+layer,
		"KUSAW_TEST_OVERLAY_SCRIPT="+script), env...)
	return cmd
}

// inOverlay runs script as a step would, in w's tree seen through a new
// write layer, and returns the layer's folder (not applied yet).
func inOverlay(t testing.TB, w *Worktree, script string, env ...string) string {
	t.Helper()
	bwrap := needOverlay(t)
	layer, err := w.NewLayer()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := overlayCmd(bwrap, w.Path, layer, script, env).CombinedOutput(); err != nil {
		t.Fatalf("the step in the overlay: %v\n%s", err, out)
	}
	return layer
}

// layerAttack is a step's script run through the write layer; plant, if
// set, forges the upper afterwards as no overlay would (the upper is the
// step's: hostile whatever the kernel writes); check looks at what it did.
type layerAttack struct {
	name   string
	script string
	plant  func(t *testing.T, upper string)
	twin   bool // the commit equals git add -A of the same script in a plain clone
	check  func(t *testing.T, w *Worktree, sha, outside string)
}

var layerAttacks = []layerAttack{
	{name: "adds deletes renames chmods", twin: true, script: `
		mkdir -p new && echo added > new/file.txt
		rm gone.txt
		mv src/deep/b.go src/moved.go
		chmod 755 README
		chmod 644 bin/run.sh
		echo changed > src/a.go
		mv src/deep src/deeper   # a lower folder: EXDEV, mv copies
		echo ignored > debug.log`},
	{name: "link planted where a tracked folder is", twin: true, script: `rm -rf src/deep && ln -s "$OUTSIDE" src/deep`,
		check: func(t *testing.T, w *Worktree, sha, outside string) {
			if got := tgit(t, w.Path, "cat-file", "-p", sha+":src/deep"); got != outside {
				t.Errorf("src/deep committed as %q, want a link to %s", got, outside)
			}
		}},
	{name: "folder over a tracked link to a folder outside", twin: true, script: `rm ldir && mkdir ldir && echo pwned > ldir/x && mkdir ldir/sub && echo pwned > ldir/sub/y`},
	{name: "plain folder over a tracked link to a folder outside (forged)", twin: true, script: `rm ldir && mkdir ldir && echo pwned > ldir/x`,
		plant: func(t *testing.T, upper string) {
			// Not opaque, as if the folder had been there underneath:
			// the tree's link must still not be entered.
			for _, x := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
				unix.Lremovexattr(filepath.Join(upper, "ldir"), x)
			}
			if _, err := unix.Lgetxattr(filepath.Join(upper, "ldir"), "user.overlay.opaque", make([]byte, 8)); err == nil {
				t.Fatal("the opaque mark is still there")
			}
		}},
	{name: "whiteout of a tracked file", twin: true, script: `rm README && rm src/deep/b.go`},
	{name: "opaque folder over a tracked folder", twin: true, script: `rm -rf src && mkdir src && echo new > src/new.go`},
	{name: "file over a tracked folder and folder over a tracked file", twin: true, script: `rm -rf src/deep && echo f > src/deep && rm README && mkdir README && echo r > README/r`},
	{name: "fifo and device", script: `mkfifo src/pipe && rm README && mkfifo README`,
		plant: func(t *testing.T, upper string) {
			if os.Geteuid() != 0 {
				return // only root makes a device node; the FIFOs stand
			}
			if err := unix.Mknod(filepath.Join(upper, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, w *Worktree, sha, _ string) {
			files := tgit(t, w.Path, "ls-tree", "-r", "--name-only", sha)
			if strings.Contains(files, "pipe") || strings.Contains(files, "null") || strings.Contains(files, "README") {
				t.Errorf("the commit holds:\n%s", files)
			}
			if len(w.LayerDropped) < 2 {
				t.Errorf("dropped: %v", w.LayerDropped)
			}
		}},
	{name: "odd names", twin: true, script: `
		echo x > "src/new
line"
		mkdir "dir
nl" && echo y > "dir
nl/f"
		echo z > src/-rf && echo w > "src/..." && echo v > ":(glob)*"`},
	{name: ".git file and folders", script: `
		rm .git && printf 'gitdir: /nowhere\n' > .git
		mkdir -p sub/.git/hooks && printf '#!/bin/sh\ntouch /tmp/kusaw-pwned\n' > sub/.git/hooks/post-checkout
		echo s > sub/kept.txt
		mkdir -p .GIT && echo h > .GIT/HEAD`,
		check: func(t *testing.T, w *Worktree, sha, _ string) {
			files := tgit(t, w.Path, "ls-tree", "-r", "--name-only", sha)
			if !strings.Contains(files, "sub/kept.txt") || strings.Contains(strings.ToLower("\n"+files+"/"), "/.git/") || strings.Contains(strings.ToLower("\n"+files), "\n.git\n") {
				t.Errorf("the commit holds:\n%s", files)
			}
			if g, err := readGitFile(w.Path); err != nil || g != w.GitDir {
				t.Errorf("the tree's .git names %q (%v)", g, err)
			}
		}},
	{name: "modes 000", twin: true, script: `
		mkdir -p junk/x && echo y > junk/x/y && chmod 0 junk/x junk
		echo c > src/deep/c.go && chmod 0 src/deep
		chmod 0 README
		chmod 777 src && chmod u+s bin/run.sh`},
	{name: "hard link", twin: true, script: `ln README src/hard`},
}

// layerRepo is poolRepo with a tracked link to a folder outside the tree.
func layerRepo(t *testing.T) (dir, c1, c2, outside string) {
	t.Helper()
	dir, c1, c2 = poolRepo(t)
	outside = t.TempDir()
	for _, c := range []*string{&c1, &c2} {
		tgit(t, dir, "checkout", "-q", *c)
		os.Symlink(outside, filepath.Join(dir, "ldir"))
		tgit(t, dir, "add", "ldir")
		tgit(t, dir, "commit", "-q", "-m", "ldir")
		*c = tgit(t, dir, "rev-parse", "HEAD")
	}
	tgit(t, dir, "checkout", "-q", "main")
	tgit(t, dir, "reset", "-q", "--hard", c1)
	return dir, c1, c2, outside
}

// Each attack from the step's side, through the write layer: after the
// apply, the commit, the release and the next take (which skips the
// cleaning walk), the tree equals a fresh checkout of its base, file by
// file; nothing was written outside the tree; where git add -A of the
// same script in a plain clone is defined, the commit is exactly that.
func TestLayerApplyAttacks(t *testing.T) {
	isolateHome(t)
	needOverlay(t)
	dir, c1, c2, outside := layerRepo(t)
	want := map[string]string{c1: freshManifest(t, dir, c1), c2: freshManifest(t, dir, c2)}
	state := t.TempDir()
	for i, a := range layerAttacks {
		for _, next := range []string{c1, c2} {
			name := map[string]string{c1: "same-base", c2: "new-base"}[next]
			t.Run(a.name+"/next-"+name, func(t *testing.T) {
				r := open(t, dir)
				pool := r.Pool(state)
				tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
				w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", fmt.Sprint(i, name), 1), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				layer := inOverlay(t, w, a.script, "OUTSIDE="+outside)
				if a.plant != nil {
					a.plant(t, filepath.Join(layer, "upper"))
				}
				if err := w.ApplyLayer(layer); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Lstat(layer); err == nil {
					t.Errorf("the layer folder %s is still there", layer)
				}
				if ents, _ := os.ReadDir(outside); len(ents) > 0 {
					t.Errorf("the apply wrote outside the tree: %v", ents)
				}
				runs := fullAdds.Load()
				sha, _, err := w.CommitAll("m")
				if err != nil {
					t.Fatal(err)
				}
				if fullAdds.Load() != runs {
					t.Errorf("the commit fell back to git add --all")
				}
				if a.twin {
					ref := refClone(t, dir, c1)
					cmd := exec.Command("/bin/sh", "-ec", a.script)
					cmd.Dir, cmd.Env = ref, append(os.Environ(), "OUTSIDE="+outside)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("the script in a plain clone: %v\n%s", err, out)
					}
					readableTree(ref, true)
					tgit(t, ref, "add", "-A")
					if wantTree, got := tgit(t, ref, "write-tree"), tgit(t, dir, "rev-parse", sha+"^{tree}"); got != wantTree {
						diff, _ := tgitErr(dir, "diff", "--stat", wantTree, got)
						t.Errorf("committed tree %s, git add -A of the same change gives %s:\n%s", got, wantTree, diff)
					}
				}
				if a.check != nil {
					a.check(t, w, sha, outside)
				}
				if ok, err := r.Release(w); !ok || err != nil {
					t.Fatalf("release: %v %v", ok, err)
				}
				assertPoolHoldsNoLeftover(t, pool, want[c1])
				if slot, _ := filepath.Glob(filepath.Join(pool.Dir(), "idle-*", "layer")); len(slot) != 1 {
					t.Fatalf("the released tree is not marked as reverted by its layer: %v", slot)
				}
				tgit(t, dir, "update-ref", "refs/heads/kusaw/r", next)
				w2, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", fmt.Sprint(i, name), 2), filepath.Join(state, "runs", newID(), "app"), AddOptions{Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				if !w2.Reused || !w2.Trusted {
					t.Errorf("reused %v, walk skipped %v (%s)", w2.Reused, w2.Trusted, w2.ReuseFailed)
				}
				if got := manifest(t, w2.Path); got != want[next] {
					t.Errorf("the reused tree differs from a fresh checkout of its base:\n%s\nwant:\n%s", got, want[next])
				}
				if st := tgit(t, w2.Path, "status", "--porcelain", "--ignored", "--untracked-files=all"); st != "" {
					t.Errorf("git status in the reused tree: %s", st)
				}
				if _, err := os.Stat("/tmp/kusaw-pwned"); err == nil {
					t.Errorf("a program the step planted ran")
				}
				if err := r.RemoveWorktree(w2); err != nil {
					t.Fatal(err)
				}
				w2.DropIndex()
			})
		}
	}
}

// Only a release by a write layer's survey marks a tree as needing no
// cleaning walk: a tree a step wrote directly, or whose layer could not
// be applied, is walked at its next take (and its leftovers go).
func TestLayerTrustOnlyAfterItsRelease(t *testing.T) {
	isolateHome(t)
	needOverlay(t)
	dir, c1, c2, _ := layerRepo(t)
	want := freshManifest(t, dir, c1)
	state := t.TempDir()
	r := open(t, dir)
	pool := r.Pool(state)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	attempt := func(n int) *Worktree {
		t.Helper()
		w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", n), filepath.Join(state, fmt.Sprint(n), "app"), AddOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	release := func(w *Worktree) {
		t.Helper()
		if ok, err := r.Release(w); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
	// 1: a step without a layer (sandbox: off) writes the tree itself.
	w := attempt(1)
	write(t, filepath.Join(w.Path, "src", "left.txt"), "left\n")
	if _, _, err := w.CommitAll("m"); err != nil {
		t.Fatal(err)
	}
	release(w)
	// 2: walked; its layer cannot be applied (an overlay feature kusaw
	// refuses): the commit walks, and so does the next take.
	w = attempt(2)
	if !w.Reused || w.Trusted {
		t.Fatalf("attempt 2: reused %v, walk skipped %v", w.Reused, w.Trusted)
	}
	layer := inOverlay(t, w, `mkdir -p made && echo x > made/f`)
	if err := unix.Lsetxattr(filepath.Join(layer, "upper", "made"), "user.overlay.redirect", []byte("/src"), 0); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no user xattrs in the temp folder (CI's must have them): %v", err)
		}
		t.Skipf("no user xattrs in the temp folder: %v", err)
	}
	if err := w.ApplyLayer(layer); err == nil || !strings.Contains(err.Error(), "redirect_dir") {
		t.Fatalf("the apply of a redirected folder: %v", err)
	}
	if w.Layered() {
		t.Fatal("a failed apply left a layer survey")
	}
	if _, _, err := w.CommitAll("m"); err != nil {
		t.Fatal(err)
	}
	release(w)
	if m, _ := filepath.Glob(filepath.Join(pool.Dir(), "idle-*", "layer")); len(m) != 0 {
		t.Fatalf("a tree whose layer failed is marked: %v", m)
	}
	// 3: walked again (what the walk finds is left to timing: a file
	// git checked out in the same clock tick as it wrote the index is
	// racily clean, its entry smudged, so the walk checks it out again);
	// kusaw writes an included file before the step, which then changes
	// nothing through its layer.
	w = attempt(3)
	if !w.Reused || w.Trusted {
		t.Fatalf("attempt 3: reused %v, walk skipped %v", w.Reused, w.Trusted)
	}
	write(t, filepath.Join(dir, "conf", "local.log"), "a secret\n")
	copied, err := CopyIgnored(dir, w.Path, []string{"conf/local.log"}, "")
	if err != nil || len(copied) != 1 {
		t.Fatalf("include: %v %v", copied, err)
	}
	w.NoteWritten(copied...)
	layer = inOverlay(t, w, `cat conf/local.log >/dev/null`)
	if err := w.ApplyLayer(layer); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.CommitAll("m"); err != nil {
		t.Fatal(err)
	}
	release(w)
	assertPoolHoldsNoLeftover(t, pool, want)
	// 4: no walk, and the tree is the checkout; its step changes
	// nothing: no commit, and the tree goes back marked.
	w = attempt(4)
	if !w.Reused || !w.Trusted {
		t.Fatalf("attempt 4: reused %v, walk skipped %v (%s)", w.Reused, w.Trusted, w.ReuseFailed)
	}
	if got := manifest(t, w.Path); got != want {
		t.Errorf("the tree differs from a fresh checkout:\n%s\nwant:\n%s", got, want)
	}
	layer = inOverlay(t, w, `cat README >/dev/null`)
	if err := w.ApplyLayer(layer); err != nil {
		t.Fatal(err)
	}
	if sha, changed, err := w.CommitAll("m"); err != nil || changed || sha != c1 {
		t.Fatalf("commit of nothing: %s %v %v", sha, changed, err)
	}
	release(w)
	// 5: on a new base, checked out over the tree taken without a walk.
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c2)
	w = attempt(5)
	if !w.Reused || !w.Trusted {
		t.Fatalf("attempt 5: reused %v, walk skipped %v (%s)", w.Reused, w.Trusted, w.ReuseFailed)
	}
	if got, want2 := manifest(t, w.Path), freshManifest(t, dir, c2); got != want2 {
		t.Errorf("the tree differs from a fresh checkout of the new base:\n%s\nwant:\n%s", got, want2)
	}
	write(t, filepath.Join(w.Path, "direct.txt"), "x\n") // no layer: the commit walks
	if sha, changed, err := w.CommitAll("m"); err != nil || !changed || !strings.Contains(tgit(t, dir, "ls-tree", "--name-only", sha), "direct.txt") {
		t.Fatalf("commit without a layer after a trusted take: %s %v %v", sha, changed, err)
	}
}

// The sandbox's stand-in mount points that bwrap makes through the
// overlay (empty folders and files, with the folders above them) are
// kusaw's: not carried into the tree, never committed. Twin: what the
// step itself writes beside them and into a folder above one is.
func TestLayerSkipsStandIns(t *testing.T) {
	isolateHome(t)
	needOverlay(t)
	dir, c1, _, _ := layerRepo(t)
	state := t.TempDir()
	r := open(t, dir)
	tgit(t, dir, "update-ref", "refs/heads/kusaw/r", c1)
	w, err := r.AddAttemptWith("kusaw/r", AttemptBranch("r", "s", 1), filepath.Join(state, "1", "app"), AddOptions{Pool: r.Pool(state)})
	if err != nil {
		t.Fatal(err)
	}
	w.NoteWritten(filepath.Join(w.Path, ".cursor"), ".claude/settings.json", ".vscode/tasks.json", "src/.codex")
	layer := inOverlay(t, w, `
		mkdir .cursor && mkdir -p .claude .vscode && : > .claude/settings.json && : > .vscode/tasks.json && mkdir src/.codex
		echo mine > .vscode/notes.txt`)
	if err := w.ApplyLayer(layer); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".cursor", ".claude", ".vscode/tasks.json", "src/.codex"} {
		if _, err := os.Lstat(filepath.Join(w.Path, p)); err == nil {
			t.Errorf("%s was carried into the tree", p)
		}
	}
	sha, _, err := w.CommitAll("m")
	if err != nil {
		t.Fatal(err)
	}
	if files := tgit(t, dir, "ls-tree", "-r", "--name-only", sha); !strings.Contains(files, ".vscode/notes.txt") || strings.Contains(files, "settings.json") || strings.Contains(files, "tasks.json") {
		t.Errorf("the commit holds:\n%s", files)
	}
}
