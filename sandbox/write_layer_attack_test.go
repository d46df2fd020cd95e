//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// layerScript attacks the write layer from inside ($1 the worktree, $2
// the layer's folder on the host), then does what a step legitimately
// does: each line prints name=exit status (or a count).
const layerScript = `T=$1; L=$2; H=$3
for k in CapInh CapPrm CapEff CapBnd CapAmb NoNewPrivs; do echo "$k=$(awk -v k=$k: '$1==k{print $2}' /proc/self/status)"; done
command -v umount >/dev/null && command -v mount >/dev/null; echo have_mount=$?
umount "$T" 2>/dev/null; echo umount=$?
umount -l "$T" 2>/dev/null; echo umount_lazy=$?
mount -o remount,rw "$T/.git" 2>/dev/null; echo remount=$?
mount -t tmpfs none "$T/docs" 2>/dev/null; echo mount=$?
ls -d "$L" "$L/upper" "$L/work" 2>/dev/null; echo see_layer=$?
ls -d /proc/1/root"$L" /proc/self/root"$L" 2>/dev/null; echo see_layer_proc=$?
n=0; for f in /proc/[0-9]*/fd/* /proc/[0-9]*/cwd /proc/[0-9]*/root /proc/[0-9]*/exe; do case "$(readlink "$f" 2>/dev/null)" in "$L"*) n=$((n+1));; esac; done; echo layer_links=$n
( echo evil > "$T/.git" ) 2>/dev/null; echo write_dotgit=$?
( echo evil > "$T/.claude/settings.json" ) 2>/dev/null; echo write_settings=$?
( echo evil > "$T/.githooks/pre-commit" ) 2>/dev/null; echo write_hook=$?
( echo evil > "$T/.claude/hooks/new.sh" ) 2>/dev/null; echo add_hook=$?
( mv "$T/.claude" "$T/claude-moved" ) 2>/dev/null; echo move_settings=$?
# The overlay's own attributes: refused, or (Linux 6.7 on) stored escaped
# as user.overlay.overlay.*; either way never as the overlay's own in the
# upper layer, which kusaw reads afterwards (checkUpper).
"$H" __sandbox_helper setxattr "$T/docs" user.overlay.opaque y 2>/dev/null; echo set_opaque=$?
"$H" __sandbox_helper setxattr "$T/README.md" user.overlay.redirect /etc 2>/dev/null; echo set_redirect=$?
"$H" __sandbox_helper setxattr "$T/README.md" trusted.overlay.opaque y 2>/dev/null; echo set_trusted=$?
"$H" __sandbox_helper setxattr "$T/docs/b.md" user.kusaw.note ok; echo set_user_xattr=$?
echo changed >> "$T/README.md"; echo append=$?
echo new > "$T/new.txt"; echo create=$?
rm "$T/docs/a.md"; echo remove=$?
chmod 755 "$T/README.md"; echo chmod=$?
mv "$T/new.txt" "$T/renamed.txt"; echo rename=$?
mkdir -p "$T/sub/deep" && echo deep > "$T/sub/deep/f"; echo mkdir=$?
perl -e 'rename($ARGV[0], $ARGV[1]) or exit($!+0)' "$T/pkg" "$T/pkg-renamed"; echo rename_dir=$?
mv "$T/pkg" "$T/pkg-moved"; echo mv_dir=$?
rm -r "$T/lib" && mkdir "$T/lib" && echo y > "$T/lib/y.txt"; echo replace_dir=$?
git -C "$T" status --porcelain >/dev/null 2>&1; echo git_status=$?
echo done=1
`

// The write layer from the attacker's side, with real bwrap and the real
// kernel, as the running user and (as root) as uid 65534 too: the step
// holds no capability and cannot mount, unmount or remount; it cannot
// reach the layer's folders by any path; the .git file, settings and
// hooks stay read-only under the overlay. The twin: ordinary writes,
// removals, modes and renames work and land in the upper layer (a
// removal as a whiteout), git works, and the tree on the host is
// unchanged, byte for byte, after it all. Without the layer (the control
// below) the same step changes the tree: the comparison can fail.
func TestWriteLayerAttacks(t *testing.T) {
	if os.Getenv("KUSAW_TEST_LAYER") != "" {
		layerAttackCase(t)
		stageCapsCase(t)
		return
	}
	layerAttackCase(t)
	stageCapsCase(t)
	if os.Geteuid() != 0 {
		return
	}
	runAsNobody(t, "^TestWriteLayerAttacks$", "KUSAW_TEST_LAYER=1")
}

func layerAttackCase(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "the write layer's attacks run the real sandbox")
	f := newFixture(t)
	layer := newLayer(t, filepath.Join(f.attempt, "layer-1"))
	in := f.input()
	in.LoginPaths = nil
	in.Worktrees[0].Layer = layer
	if err := CheckLayer(f.attempt); err != nil {
		t.Fatalf("as uid %d: the layer's own check fails here, so its attacks prove nothing: %v", os.Geteuid(), err)
	}
	// The check leaves nothing, also where overlayfs left work/work
	// without permissions for a normal user to enter.
	if left, _ := filepath.Glob(filepath.Join(f.attempt, ".kusaw-layer-check-*")); len(left) > 0 {
		t.Errorf("as uid %d: the layer's check left %v", os.Geteuid(), left)
	}
	write(t, filepath.Join(f.wt, "lib", "x.txt"), "x\n") // a folder the step replaces
	write(t, filepath.Join(f.wt, "pkg", "z.txt"), "z\n") // a folder the step renames: EXDEV, mv copies
	write(t, filepath.Join(f.wt, "docs", "b.md"), "b\n") // a file the step gives an xattr of its own
	helper := filepath.Join(f.root, "bin", "helper")
	copyFile(t, os.Args[0], helper, 0o755)
	in.ExtraBinaries = []string{helper}
	before := treeSnapshot(t, f.wt)
	got := runLayerStep(t, in, f.wt, layer, helper)
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
		"have_mount": "0", "see_layer": "2", "see_layer_proc": "2", "layer_links": "0",
		"append": "0", "create": "0", "remove": "0", "chmod": "0", "rename": "0", "mkdir": "0", "set_user_xattr": "0", "replace_dir": "0", "rename_dir": "18", "mv_dir": "0", "git_status": "0", "done": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("uid %d: %s=%q, want %q", os.Geteuid(), k, got[k], v)
		}
	}
	for _, k := range []string{"umount", "umount_lazy", "remount", "mount", "write_dotgit", "write_settings", "write_hook", "add_hook", "move_settings", "set_trusted"} {
		if got[k] == "0" || got[k] == "" {
			t.Errorf("uid %d: %s=%q: the attack succeeded (or did not run)", os.Geteuid(), k, got[k])
		}
	}
	if after := treeSnapshot(t, f.wt); !mapsEqual(before, after) {
		t.Errorf("uid %d: the tree on the host changed under the layer:\n before %v\n after  %v", os.Geteuid(), before, after)
	}
	checkUpper(t, filepath.Join(layer, "upper"))
	if mounted(t, f.wt) {
		t.Errorf("uid %d: the overlay is mounted in the host's namespace", os.Geteuid())
	}
	// The control: the same step without the layer writes the tree.
	in.Worktrees[0].Layer = ""
	runLayerStep(t, in, f.wt, layer, helper)
	if after := treeSnapshot(t, f.wt); mapsEqual(before, after) {
		t.Errorf("uid %d: without the layer the step changed nothing on the host, so the comparison above proves nothing", os.Geteuid())
	}
}

// runLayerStep runs layerScript under in's plan and returns its probes.
func runLayerStep(t *testing.T, in Input, tree, layer, helper string) map[string]string {
	t.Helper()
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", layerScript, "sh", tree, layer, helper})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	p.Cleanup()
	got := parseProbes(buf.String())
	t.Logf("uid %d layer=%v:\n%s", os.Geteuid(), len(p.WriteLayers), buf.String())
	if err != nil || got["done"] != "1" {
		t.Fatalf("uid %d: the step did not finish (%v):\n%s", os.Geteuid(), err, buf.String())
	}
	return got
}

// checkUpper checks that the step's changes, and only those, are in the
// upper layer: new content and mode, the renamed file, the new folders, a
// whiteout (character device 0/0) for the removal; no protected file.
func checkUpper(t *testing.T, upper string) {
	t.Helper()
	read := func(rel string) string { b, _ := os.ReadFile(filepath.Join(upper, rel)); return string(b) }
	if read("pkg-moved/z.txt") != "z\n" {
		t.Errorf("uid %d: the folder mv copied is not in the upper layer", os.Geteuid())
	}
	if read("README.md") != "hello\nchanged\n" || read("renamed.txt") != "new\n" || read("sub/deep/f") != "deep\n" {
		t.Errorf("uid %d: the upper layer lacks the step's writes: README.md %q renamed.txt %q sub/deep/f %q", os.Geteuid(), read("README.md"), read("renamed.txt"), read("sub/deep/f"))
	}
	if fi, err := os.Lstat(filepath.Join(upper, "README.md")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("uid %d: the chmod is not in the upper layer: %v %v", os.Geteuid(), fi, err)
	}
	fi, err := os.Lstat(filepath.Join(upper, "docs", "a.md"))
	if st, ok := sysStat(fi); err != nil || fi.Mode()&fs.ModeCharDevice == 0 || !ok || st.Rdev != 0 {
		t.Errorf("uid %d: the removal left no whiteout (character device 0/0) in the upper layer: %v %v", os.Geteuid(), fi, err)
	}
	var note [8]byte
	if n, err := unix.Getxattr(filepath.Join(upper, "docs", "b.md"), "user.kusaw.note", note[:]); err != nil || string(note[:n]) != "ok" {
		t.Errorf("uid %d: the step's own xattr is not in the upper layer: %v", os.Geteuid(), err)
	}
	// The step set these on docs/ and README.md through the overlay: the
	// upper layer must not hold them as the overlay's own (an opaque
	// folder would make kusaw replace the tree's folder).
	for _, p := range []string{"docs", "README.md"} {
		for _, x := range []string{"user.overlay.opaque", "user.overlay.redirect"} {
			if _, err := unix.Getxattr(filepath.Join(upper, p), x, note[:]); err == nil {
				t.Errorf("uid %d: %s has the overlay's own %s in the upper layer", os.Geteuid(), p, x)
			}
		}
	}
	var opaque [8]byte
	if n, err := unix.Getxattr(filepath.Join(upper, "lib"), "user.overlay.opaque", opaque[:]); err != nil || string(opaque[:n]) != "y" {
		t.Errorf("uid %d: the replaced folder lib/ is not opaque in the upper layer (user.overlay.opaque: %q, %v)", os.Geteuid(), opaque[:max(n, 0)], err)
	}
	if _, err := os.Lstat(filepath.Join(upper, "lib", "x.txt")); err == nil {
		t.Errorf("uid %d: the replaced folder's old file is in the upper layer", os.Geteuid())
	}
	for _, p := range []string{"new.txt", ".git", ".claude/settings.json", ".githooks/pre-commit", ".claude/hooks/new.sh", "claude-moved"} {
		if _, err := os.Lstat(filepath.Join(upper, p)); err == nil {
			t.Errorf("uid %d: %s is in the upper layer", os.Geteuid(), p)
		}
	}
}

func sysStat(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// treeSnapshot is every entry below dir: type, mode, and content or link
// target (hashed).
func treeSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			v += " " + hex.EncodeToString(h[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		}
		out[strings.TrimPrefix(p, dir)] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// mounted says whether dir is a mount point in this process's namespace.
func mounted(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// runAsNobody runs the tests matching run again as uid 65534, from a copy
// of this test binary in a folder that user may read, with env added.
func runAsNobody(t *testing.T, run string, env ...string) {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "sandbox.test")
	copyFile(t, os.Args[0], bin, 0o755)
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	os.Chown(work, 65534, 65534)
	cmd := exec.Command(bin, "-test.run", run, "-test.v", "-test.count=1")
	cmd.Dir = work
	cmd.Env = append(append(os.Environ(), "HOME="+work, "TMPDIR="+work), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "--- PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, b)
	}
}

// stageCapsCase runs the stage itself (no bwrap) for a normal user: the
// program it execs holds no capability, though the stage was started
// with CAP_SYS_ADMIN and CAP_DAC_OVERRIDE (ambient) to mount the layer.
// As root the exec'd program is root in kusaw's namespace, as bwrap
// started by root is today; bwrap's --cap-drop ALL holds inside.
func stageCapsCase(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.Mkdir(tree, 0o700)
	layer := newLayer(t, filepath.Join(dir, "layer"))
	prog := confineProgram()
	if prog == nil {
		t.Fatal("no stage program")
	}
	cmd := exec.Command(prog[0])
	cmd.Args = layerArgv(prog[0], []confine.Layer{{Tree: tree, Upper: filepath.Join(layer, "upper"), Work: filepath.Join(layer, "work")}}, []string{"/bin/grep", "^Cap", "/proc/self/status"})
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	layerAttr(cmd.SysProcAttr, os.Geteuid(), os.Getegid())
	out, err := cmd.CombinedOutput()
	got := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	// Inheritable too: the stage was started with CAP_SYS_ADMIN and
	// CAP_DAC_OVERRIDE inheritable (ambient ones must be), and an exec
	// keeps the inheritable set, so a program with file capabilities
	// further down would get them back.
	want := []string{"CapInh", "CapPrm", "CapEff", "CapAmb"}
	if os.Geteuid() == 0 {
		// Root is root in kusaw's namespace (as bwrap started by root
		// is): its exec fills permitted and effective again.
		want = []string{"CapInh", "CapAmb"}
	}
	for _, k := range want {
		if err != nil || got[k] != "0000000000000000" {
			t.Errorf("uid %d: the program after the stage (%v) has %s %q, want none:\n%s", os.Geteuid(), err, k, got[k], out)
		}
	}
}

// The attempt's own start: under internal/proc with limits the sandbox's
// command runs held by a shell until it is placed in its cgroup; the
// layer's stage after that shell still mounts the layer (its ambient
// capabilities survive the shell's exec) and the step's write lands in
// the upper layer, with the process and memory limits in force.
func TestWriteLayerUnderLimits(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "the layer under limits runs the real sandbox")
	f := newFixture(t)
	layer := newLayer(t, filepath.Join(f.attempt, "layer-1"))
	in := f.input()
	in.LoginPaths = nil
	in.Worktrees[0].Layer = layer

	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", `echo limited > "$0/README.md" && grep -c . /proc/self/status >/dev/null && echo ok`, f.wt})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Cancel, cmd.WaitDelay = nil, 0 // proc.Run's own handling, as attempt/ does
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res := proc.Run(ctx, cmd, proc.Options{Stdout: &out, Stderr: &errb, Limits: proc.Limits{Pids: 64, Memory: 256 << 20}, Name: "layer-test"})
	p.Cleanup()
	held := cmd.Path == "/bin/sh"
	t.Logf("held by a shell until placed: %v (%s)", held, cmd.Path)
	if res.StartErr != nil || res.Exit != 0 || !strings.Contains(out.String(), "ok") {
		t.Fatalf("under limits: %+v\n%s%s", res, out.String(), errb.String())
	}
	if b, _ := os.ReadFile(filepath.Join(layer, "upper", "README.md")); string(b) != "limited\n" {
		t.Fatalf("the write is not in the upper layer: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(f.wt, "README.md")); string(b) != "hello\n" {
		t.Fatalf("the tree changed: %q", b)
	}
}

// kusaw dies (kill -9) while a step runs under a layer: the step dies too.
// bwrap's --die-with-parent holds this only while bwrap's parent is kusaw:
// the stage must exec bwrap, never start it as its own child (which would
// outlive kusaw with the step under it, unrecorded). Command's parent-death
// signal alone does not decide it (checked: without it the step still
// dies). The twin: while kusaw lives, the step runs.
func TestWriteLayerDiesWithKusaw(t *testing.T) {
	const marker = "313.25"
	if os.Getenv("KUSAW_TEST_LAYER_CHILD") != "" {
		f := newFixture(t)
		in := f.input()
		in.LoginPaths = nil
		in.Worktrees[0].Layer = newLayer(t, filepath.Join(f.attempt, "layer-1"))
		p, err := BuildPlan(in)
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := Command(context.Background(), p, []string{"/bin/sleep", marker})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("started " + f.root + "\n")
		time.Sleep(time.Minute)
		return
	}
	needTool(t, "/usr/bin/bwrap", "the layered step runs the real sandbox")
	kusaw := exec.Command(os.Args[0], "-test.run", "^TestWriteLayerDiesWithKusaw$", "-test.count=1")
	kusaw.Env = append(os.Environ(), "KUSAW_TEST_LAYER_CHILD=1")
	out, err := kusaw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := kusaw.Start(); err != nil {
		t.Fatal(err)
	}
	defer kusaw.Process.Kill()
	var line []byte
	for b := make([]byte, 1); !bytes.HasSuffix(line, []byte("\n")); {
		if _, err := out.Read(b); err != nil {
			t.Fatalf("the child did not start the step: %v %q", err, line)
		}
		line = append(line, b[0])
	}
	root, _ := strings.CutPrefix(strings.TrimSpace(string(line)), "started ")
	t.Cleanup(func() { os.RemoveAll(root) })
	if !waitFor(func() bool { return sleeping(marker) }, 10*time.Second) {
		t.Fatal("the twin: the layered step is not running while kusaw lives")
	}
	kusaw.Process.Signal(syscall.SIGKILL)
	kusaw.Wait()
	if !waitFor(func() bool { return !sleeping(marker) }, 10*time.Second) {
		t.Fatal("kusaw died and the layered step runs on")
	}
}

// sleeping says whether a process runs /bin/sleep with argument arg.
func sleeping(arg string) bool {
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && string(b) == "/bin/sleep\x00"+arg+"\x00" {
			return true
		}
	}
	return false
}

func waitFor(cond func() bool, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
