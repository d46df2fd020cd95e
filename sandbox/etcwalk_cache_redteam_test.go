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

	"golang.org/x/sys/unix"
)

// Red-team attacks on the remembered walk of /etc (etcwalk_cache_linux.go).

// ext4Image makes an ext4 image at img whose every inode has the ctime
// 1700000000 (E2FSPROGS_FAKE_TIME, as an image built reproducibly has:
// SOURCE_DATE_EPOCH pipelines pin every timestamp), holding app/pub.conf
// (0644) and, when secret, app/secret.key (0600) too.
func ext4Image(t *testing.T, img string, secret bool) {
	t.Helper()
	dir := t.TempDir()
	writeMode(t, filepath.Join(dir, "pub"), 0o644)
	writeMode(t, filepath.Join(dir, "sec"), 0o644)
	env := append(os.Environ(), "E2FSPROGS_FAKE_TIME=1700000000")
	run := func(name string, args ...string) {
		t.Helper()
		c := exec.Command(name, args...)
		c.Env, c.Dir = env, dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("mke2fs", "-q", "-F", "-t", "ext4", "-I", "256", "-U", "11111111-2222-3333-4444-555555555555",
		"-E", "hash_seed=11111111-2222-3333-4444-555555555555", img, "4M")
	cmds := "mkdir app\nwrite pub app/pub.conf\nsif app/pub.conf mode 0100644\n"
	if secret {
		cmds += "write sec app/secret.key\nsif app/secret.key mode 0100600\n"
	}
	c := exec.Command("debugfs", "-w", "-f", "-", img)
	c.Env, c.Dir, c.Stdin = env, dir, strings.NewReader(cmds)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v\n%s", err, out)
	}
}

// TestRememberedWalkRefusedAfterAnImageSwap: "ctime cannot be set from
// user space" holds for a mounted file system, not for one written while
// unmounted. A folder of /etc on an image (a loop-mounted ext4 image, an
// A/B root on the same dm or loop device) that is replaced by the next
// version of that image, built with pinned timestamps, keeps the device
// number, every inode number and every ctime the remembered walk
// compares: the new version's root-only file (app/secret.key) is not in
// the remembered list, so a plan binds nothing over it and a step reads
// it. The twin: the same image, still mounted, uses the walk.
func TestRememberedWalkRefusedAfterAnImageSwap(t *testing.T) {
	needRoot(t, "loop devices and mounts in a namespace of its own")
	for _, tool := range []string{"/usr/bin/unshare", "/usr/sbin/mke2fs", "/usr/sbin/debugfs", "/usr/sbin/losetup"} {
		needTool(t, tool, "builds and swaps the image")
	}
	imgs := t.TempDir()
	v1, v2 := filepath.Join(imgs, "v1.img"), filepath.Join(imgs, "v2.img")
	ext4Image(t, v1, false)
	ext4Image(t, v2, true)
	root := walkTree(t)
	mnt := filepath.Join(root, "vendor")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "etc-walk")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
L=$(losetup -f --show "$V1")
trap 'umount "$MNT" 2>/dev/null; losetup -d "$L" 2>/dev/null' EXIT
mount -t ext4 -o ro,noload "$L" "$MNT"
"$H" __sandbox_helper rememberwalk "$ROOT" "$FILE"
echo "== same image"
"$H" __sandbox_helper walklists "$ROOT" "$FILE"
umount "$MNT"
losetup -d "$L"
losetup "$L" "$V2"
mount -t ext4 -o ro,noload "$L" "$MNT"
echo "== next image"
"$H" __sandbox_helper walklists "$ROOT" "$FILE"
`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "V1="+v1, "V2="+v2, "MNT="+mnt, "ROOT="+root, "FILE="+file, "H="+exe)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	parts := strings.Split(string(out), "== next image\n")
	if len(parts) != 2 || !strings.Contains(parts[0], "== same image\nused\n") {
		t.Fatalf("twin: the remembered walk of the mounted image was not used:\n%s", out)
	}
	secret := filepath.Join(mnt, "app", "secret.key")
	if !strings.Contains(parts[1], "fresh: ") || !strings.Contains(parts[1][strings.Index(parts[1], "fresh: "):], secret) {
		t.Fatalf("the fresh walk of the next image does not find %s:\n%s", secret, out)
	}
	if strings.HasPrefix(parts[1], "used\n") {
		line := strings.SplitN(parts[1], "\n", 3)[1]
		if !strings.Contains(line, secret) {
			t.Errorf("after the image was swapped for one with a root-only file, the remembered walk was used and leaves %s visible:\n%s", secret, parts[1])
		}
	}
}

// TestRememberedWalkCannotBeForgedForAnotherCacheFolder: a plan hides
// kusaw's cache folder as its own process names it (XDG_CACHE_HOME, else
// HOME/.cache), but the file a later kusaw reads is named by that later
// process's environment. A step of a kusaw whose XDG_CACHE_HOME is set
// (a service, a setup or unsandboxed step of the factory, which get
// XDG_CACHE_HOME=<attempt tmp>/cache) and whose plan shows the user's
// ~/.cache writable writes ~/.cache/kusaw/etc-walk: a walk of only /etc
// itself (its device, inode, mode and ctime, which any step can stat),
// which every check of the file passes (this user's, 0600, in a folder of
// this user's). The next kusaw without XDG_CACHE_HOME uses it and hides
// nothing of /etc: its step reads /etc/shadow. The twin: the step may
// still write the rest of that cache folder.
func TestRememberedWalkCannotBeForgedForAnotherCacheFolder(t *testing.T) {
	needRoot(t, "the secret is root's: /etc/shadow, which root inside reads unless hidden")
	needSandbox(t, "runs the real sandbox")
	secret := ""
	for _, e := range unreadableBelow(systemSecretsIn) {
		if !e.dir && (secret == "" || e.path == "/etc/shadow") {
			secret = e.path
		}
	}
	if secret == "" {
		// Debian and every distribution kusaw supports has /etc/shadow.
		if os.Getenv("CI") == "true" {
			t.Fatal("no root-only file in /etc to read through a forged walk")
		}
		t.Skip("no root-only file in /etc")
	}
	f := newFixture(t)
	usePool(t, f)
	old := WalkCacheFile
	WalkCacheFile = ""
	t.Cleanup(func() { WalkCacheFile = old })
	home := fakePasswdHome(t, f)
	service := filepath.Join(f.root, "servicecache") // the first kusaw's XDG_CACHE_HOME
	user := filepath.Join(f.root, "usercache")       // the user's ~/.cache: the second kusaw's
	pw := filepath.Join(home, ".cache")              // the cache folder of the euid's home in the user database
	for _, d := range []string{service, user, pw} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// The first kusaw: its step sees the user's cache folder, writable.
	t.Setenv("XDG_CACHE_HOME", service)
	// The best a step can do: /etc's own record as the host has it (its
	// mount's id guessed right: the ids count up from boot).
	rootRec, err := statRecord(unix.AT_FDCWD, systemSecretsIn, systemSecretsIn, 0)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := encodeWalk(systemSecretsIn, []walkRecord{rootRec})
	var esc strings.Builder
	for _, c := range forged {
		fmt.Fprintf(&esc, "\\%03o", c)
	}
	in := f.input()
	in.AllowWrite = []string{user, pw}
	p := mustPlan(t, in)
	script := fmt.Sprintf(`set -e
touch %[1]s/ok %[3]s/ok
for c in %[1]s %[3]s; do
  { mkdir -p $c/kusaw && printf '%[2]s' > $c/kusaw/etc-walk && chmod 600 $c/kusaw/etc-walk && echo forged in $c; } 2>/dev/null || true
done`, user, esc.String(), pw)
	out1, err := runPlan(t, p, script)
	if err != nil {
		t.Fatalf("the first step: %v\n%s", err, out1)
	}
	t.Logf("the first step: %s", out1)
	if strings.Contains(out1, "forged in "+pw) {
		t.Errorf("the step wrote the remembered walk's folder %s/kusaw", pw)
	}
	if !exists(filepath.Join(user, "ok")) || !exists(filepath.Join(pw, "ok")) {
		t.Fatalf("twin: the step could not write the cache folders: %s", out1)
	}

	// The second kusaw, with the user's own cache folder.
	t.Setenv("XDG_CACHE_HOME", user)
	p2 := mustPlan(t, f.input())
	out, _ := runPlan(t, p2, `cat `+secret+` >/dev/null 2>&1 && echo READ-SECRET; true`)
	if strings.Contains(out, "READ-SECRET") {
		t.Errorf("a step of an earlier kusaw forged the walk (%s): the next kusaw's step read %s", strings.TrimSpace(out1), secret)
	}
	// The twin: the walk is remembered, and used, where every kusaw of
	// the user looks.
	if file := walkCachePath(systemSecretsIn); !within(pw, file) {
		t.Errorf("the walk is remembered in %s, not in %s", file, pw)
	} else if got, ok := cachedWalk(systemSecretsIn, file); ok && !slices.Equal(got, unreadableBelow(systemSecretsIn)) {
		t.Errorf("the remembered walk is not the walk of /etc: %v", got)
	} else if !ok {
		t.Logf("no walk remembered in %s (an entry of /etc changed a moment before?)", file)
	}
}

// fakePasswdHome points passwdHome at a user database whose line for the
// euid names a home in the fixture, and returns that home.
func fakePasswdHome(t *testing.T, f *fixture) string {
	t.Helper()
	home := filepath.Join(f.root, "pwhome")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(f.root, "passwd")
	line := fmt.Sprintf("someone:x:%d:%d::/nonexistent:/bin/sh\n", os.Geteuid()+1, os.Getegid())
	line += fmt.Sprintf("me:x:%d:%d:me:%s:/bin/sh\n", os.Geteuid(), os.Getegid(), home)
	if err := os.WriteFile(db, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	old := passwdFile
	passwdFile = db
	t.Cleanup(func() { passwdFile = old })
	return home
}

// TestRememberedWalkOfAnotherBootRefused: a walk remembered in another
// boot (a root file system's image written offline takes a reboot to
// reach, and a home shared between machines holds other machines' walks)
// is refused; the twin, this boot's, is used.
func TestRememberedWalkOfAnotherBootRefused(t *testing.T) {
	root := walkTree(t)
	file := filepath.Join(t.TempDir(), "etc-walk")
	rememberAs(t, root, file)
	if _, ok := cachedWalk(root, file); !ok {
		t.Fatal("twin: this boot's remembered walk was not used")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	id := bootID()
	other := strings.Replace(string(b), "\n"+id+"\n", "\n00000000-0000-0000-0000-000000000000\n", 1)
	if other == string(b) {
		t.Fatalf("the file does not hold the boot's id %q", id)
	}
	if err := os.WriteFile(file, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, ok := cachedWalk(root, file); ok {
		t.Errorf("a walk remembered in another boot was used: %v", l)
	}
}

// TestWalkSeesAFileMountedOnALink: a mount can be made on a link itself,
// not its target (open_tree and move_mount do not follow it), and
// bubblewrap's bind of /etc carries it: a root-only file mounted on a
// link of /etc is read through the link's name in the sandbox. The walk
// leaves links alone by their directory entry's type (DT_LNK, the type
// beneath the mount), so every walk, fresh or remembered, also stats each
// mount point below its root from mountinfo (withMountPoints). The twin:
// the same link unmounted is left alone.
func TestWalkSeesAFileMountedOnALink(t *testing.T) {
	needRoot(t, "mounts in a namespace of its own")
	needTool(t, "/usr/bin/unshare", "makes the mount namespace")
	root := walkTree(t)
	link := filepath.Join(root, "resolv.conf")
	if err := os.Symlink("hosts", link); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.key")
	writeMode(t, secret, 0o600)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`"$0" __sandbox_helper walklists "$1" "$1/none"; "$0" __sandbox_helper mountonlink "$2" "$3" && echo "== mounted" && "$0" __sandbox_helper walklists "$1" "$1/none"`,
		exe, root, secret, link).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	parts := strings.Split(string(out), "== mounted\n")
	if len(parts) != 2 {
		t.Fatalf("no mount on the link:\n%s", out)
	}
	if strings.Contains(parts[0], link) {
		t.Errorf("twin: the link alone was listed:\n%s", parts[0])
	}
	if !strings.Contains(parts[1], "{"+link+" false}") {
		t.Errorf("a root-only file mounted on the link %s is not hidden by the walk:\n%s", link, parts[1])
	}
}
