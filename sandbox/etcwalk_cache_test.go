//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// walkTree is a small /etc: a public file, a root-only file, a public
// folder with a group-only file, and a root-only folder.
func walkTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, mode := range map[string]os.FileMode{"hosts": 0o644, "shadow": 0o600, "ssl/certs/ca.pem": 0o644, "ssl/group.key": 0o640, "private/key": 0o644} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	return root
}

// rememberAs walks root and remembers it in file as a walk that started
// after walkRacyFor had passed (the tree was just made); it fails the
// test when nothing was written.
func rememberAs(t *testing.T, root, file string) []unreadable {
	t.Helper()
	os.Remove(file)
	w := startRecordedWalk(root)
	w.help()
	l := w.result()
	rememberWalk(w, file, time.Now().Add(walkRacyFor+time.Second))
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the walk of %s was not remembered: %v", root, err)
	}
	return l
}

// TestRememberedWalkUsedOnlyWhenNothingChanged: a remembered walk gives
// the walk's list while nothing it looked at changed (the twin), and is
// refused after every change that could alter the list, each the way
// one would make a file hidden until then visible to a step: a file
// chmod'ed to root-only, a folder made root-only, a root-only file
// added, an entry renamed over, a folder's times set back after a file
// was added to it, an owner changed.
func TestRememberedWalkUsedOnlyWhenNothingChanged(t *testing.T) {
	changes := []struct {
		name   string
		change func(t *testing.T, root string)
	}{
		{"chmod a public file root-only", func(t *testing.T, root string) { chmod(t, filepath.Join(root, "hosts"), 0o600) }},
		{"chmod a public folder root-only", func(t *testing.T, root string) { chmod(t, filepath.Join(root, "ssl/certs"), 0o700) }},
		{"add a root-only file", func(t *testing.T, root string) { writeMode(t, filepath.Join(root, "ssl/new.key"), 0o600) }},
		{"rename a root-only file over a public one", func(t *testing.T, root string) {
			writeMode(t, filepath.Join(root, "tmp.key"), 0o600)
			if err := os.Rename(filepath.Join(root, "tmp.key"), filepath.Join(root, "ssl/certs/ca.pem")); err != nil {
				t.Fatal(err)
			}
		}},
		{"add a file, then set its folder's times back", func(t *testing.T, root string) {
			dir := filepath.Join(root, "ssl/certs")
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			writeMode(t, filepath.Join(dir, "b.key"), 0o600)
			if err := os.Chtimes(dir, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}},
		{"make a public file private again and back", func(t *testing.T, root string) {
			chmod(t, filepath.Join(root, "hosts"), 0o600)
			chmod(t, filepath.Join(root, "hosts"), 0o644)
		}},
		{"replace a file by a link", func(t *testing.T, root string) {
			p := filepath.Join(root, "hosts")
			os.Remove(p)
			if err := os.Symlink("shadow", p); err != nil {
				t.Fatal(err)
			}
		}},
	}
	if os.Geteuid() == 0 {
		changes = append(changes, struct {
			name   string
			change func(t *testing.T, root string)
		}{"change a file's owner", func(t *testing.T, root string) {
			if err := os.Chown(filepath.Join(root, "hosts"), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}})
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			root := walkTree(t)
			file := filepath.Join(t.TempDir(), "etc-walk")
			fresh := rememberAs(t, root, file)
			got, ok := cachedWalk(root, file)
			if !ok || !slices.Equal(got, fresh) {
				t.Fatalf("twin: the remembered walk of an unchanged tree was not used (%v) or differs: %v, the walk %v", ok, got, fresh)
			}
			// A ctime moves by the file system's clock tick: wait past it.
			time.Sleep(20 * time.Millisecond)
			c.change(t, root)
			if got, ok := cachedWalk(root, file); ok {
				t.Errorf("after the change the remembered walk was used: %v; a fresh walk finds %v", got, unreadableBelow(root))
			}
		})
	}
}

// TestRememberedWalkNotWrittenWhenRacy: a walk is not remembered when an
// entry changed within walkRacyFor of its start (a change in the same
// clock tick would leave the ctime compared as it was), nor when it
// could not read everything.
func TestRememberedWalkNotWrittenWhenRacy(t *testing.T) {
	root := walkTree(t)
	file := filepath.Join(t.TempDir(), "etc-walk")
	started := time.Now()
	w := startRecordedWalk(root)
	w.help()
	w.result()
	rememberWalk(w, file, started)
	if _, err := os.Stat(file); err == nil {
		t.Error("a walk of a tree changed a moment before was remembered")
	}
	w = startRecordedWalk(root)
	w.help()
	w.result()
	w.partial.Store(true)
	rememberWalk(w, file, time.Now().Add(walkRacyFor+time.Second))
	if _, err := os.Stat(file); err == nil {
		t.Error("a partial walk was remembered")
	}
}

// TestRememberedWalkFileTrusted: the remembered walk decides what a step
// sees, so it is read only from a file of this user's that no one else
// may write, in such a folder, not through a link, and only for its own
// root; a forged file (one that leaves shadow out) is refused in each of
// those places, and a file whose content is not the walk's is refused.
func TestRememberedWalkFileTrusted(t *testing.T) {
	root := walkTree(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "etc-walk")
	rememberAs(t, root, file)
	if _, ok := cachedWalk(root, file); !ok {
		t.Fatal("twin: the remembered walk was not used")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what, root, file string) {
		t.Helper()
		if l, ok := cachedWalk(root, file); ok {
			t.Errorf("%s: the remembered walk was used: %v", what, l)
		}
	}
	chmod(t, file, 0o620)
	refused("a group-writable file", root, file)
	chmod(t, file, 0o600)
	chmod(t, dir, 0o777)
	refused("a folder others may write", root, file)
	chmod(t, dir, 0o700)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	refused("a link to the file", root, link)
	refused("another root", filepath.Join(root, "ssl"), file)
	for i, bad := range [][]byte{b[:len(b)-3], append(slices.Clone(b), 1, 2, 3), []byte("kusaw etc walk 0\n" + root + "\n"), {}} {
		f := filepath.Join(dir, "bad")
		if err := os.WriteFile(f, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		refused("damaged content "+string(rune('a'+i)), root, f)
	}
	// A record naming a path outside its root.
	recs, ok := decodeWalk(b, root)
	if !ok {
		t.Fatal("the file written is not read back")
	}
	recs[len(recs)-1].path = "/etc/passwd"
	forged, _ := encodeWalk(root, recs)
	if err := os.WriteFile(filepath.Join(dir, "outside"), forged, 0o600); err != nil {
		t.Fatal(err)
	}
	refused("a record outside root", root, filepath.Join(dir, "outside"))
}

// TestRememberedWalkOfEtc: on the machine's /etc the remembered walk
// gives what a fresh walk does, through the plan's path (unreadableIn)
// and through the walk started ahead.
func TestRememberedWalkOfEtc(t *testing.T) {
	file := filepath.Join(t.TempDir(), "etc-walk")
	old := WalkCacheFile
	WalkCacheFile = file
	t.Cleanup(func() { WalkCacheFile = old })
	fresh := unreadableBelow(systemSecretsIn)
	rememberAs(t, systemSecretsIn, file)
	if got, ok := cachedWalk(systemSecretsIn, file); !ok || !slices.Equal(got, fresh) {
		t.Fatalf("the remembered walk of /etc (used: %v) found\n%v\nthe walk\n%v", ok, got, fresh)
	}
	if got := unreadableIn(systemSecretsIn); !slices.Equal(got, fresh) {
		t.Errorf("the plan's walk found\n%v\nthe walk\n%v", got, fresh)
	}
	WalkSystemAhead()
	if got := unreadableIn(systemSecretsIn); !slices.Equal(got, fresh) {
		t.Errorf("the walk ahead found\n%v\nthe walk\n%v", got, fresh)
	}
	WalkCacheFile = "off"
	if walkCachePath(systemSecretsIn) != "" || walkCachePath("/usr") != "" {
		t.Error("off, or another folder, still names a file")
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func writeMode(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	chmod(t, p, mode)
}

// TestRememberedWalkOutOfAStepsReach: the remembered walk lies in kusaw's
// own cache folder, which a plan hides even from a step whose writable
// folder is the user's cache: the step cannot replace it with a walk that
// leaves /etc's secrets out, nor remove it. The twin: the step writes the
// rest of the cache folder.
func TestRememberedWalkOutOfAStepsReach(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	usePool(t, f)
	cache := filepath.Join(fakePasswdHome(t, f), ".cache")
	os.MkdirAll(cache, 0o755)
	t.Setenv("XDG_CACHE_HOME", cache)
	old := WalkCacheFile
	WalkCacheFile = ""
	t.Cleanup(func() { WalkCacheFile = old })
	file := walkCachePath(systemSecretsIn)
	if !within(cache, file) {
		t.Fatalf("the walk is remembered in %s, not in %s", file, cache)
	}
	rememberAs(t, systemSecretsIn, file)
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	in := f.input()
	in.AllowWrite = []string{cache}
	p := mustPlan(t, in)
	script := fmt.Sprintf(`touch %[1]s/ok || { echo "cannot write the cache folder"; exit 3; }
f=%[2]s
printf 'kusaw etc walk 1\n/etc\n' > "$f" 2>/dev/null && echo forged
mkdir -p %[1]s/kusaw 2>/dev/null && printf x > %[1]s/kusaw/etc-walk.new 2>/dev/null && mv %[1]s/kusaw/etc-walk.new "$f" 2>/dev/null && echo replaced
rm -f "$f" 2>/dev/null
true`, cache, file)
	out, err := runPlan(t, p, script)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Errorf("the step changed the remembered walk (%s)", out)
	}
	if got, ok := cachedWalk(systemSecretsIn, file); !ok || !slices.Equal(got, unreadableBelow(systemSecretsIn)) {
		t.Errorf("after the step the remembered walk is not the walk of /etc (used: %v): %v", ok, got)
	}
	if !exists(filepath.Join(cache, "ok")) {
		t.Errorf("the step could not write the cache folder: %s", out)
	}
}

// TestRememberedWalkRefusedUnderAMount: a mount moves no ctime, so a
// remembered walk must see one by the device and inode it records: in a
// mount namespace of its own, a root-only file bound over a public file,
// and a folder holding one bound over a public folder, each refuse the
// walk. The twin: the same namespace without the mount uses it.
func TestRememberedWalkRefusedUnderAMount(t *testing.T) {
	needRoot(t, "mounts in a namespace of its own")
	needTool(t, "/usr/bin/unshare", "makes the mount namespace")
	root := walkTree(t)
	file := filepath.Join(t.TempDir(), "etc-walk")
	rememberAs(t, root, file)
	outside := t.TempDir()
	writeMode(t, filepath.Join(outside, "secret.key"), 0o600)
	if err := os.MkdirAll(filepath.Join(outside, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeMode(t, filepath.Join(outside, "dir", "secret.key"), 0o600)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, mount, want string }{
		{"no mount (twin)", "true", "used"},
		{"a root-only file over a public one", "mount --bind " + filepath.Join(outside, "secret.key") + " " + filepath.Join(root, "hosts"), "refused"},
		{"a folder with a root-only file over a public folder", "mount --bind " + filepath.Join(outside, "dir") + " " + filepath.Join(root, "ssl/certs"), "refused"},
	} {
		// Remembered in the namespace itself: another namespace's mounts
		// have ids of their own, and refuse the walk whatever they hold.
		script := `"$0" __sandbox_helper rememberwalk "$1" "$2" && ` + c.mount + ` && exec "$0" __sandbox_helper cachedwalk "$1" "$2"`
		out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, exe, root, file).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != c.want {
			t.Errorf("%s: the remembered walk was %s, want %s", c.name, got, c.want)
		}
	}
}
