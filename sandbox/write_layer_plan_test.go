//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kusaw/kusaw/internal/rmtree"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// layerMain serves the write-layer stage when this test binary is the
// stage's program (no C compiler for kusaw-bridge).
func layerMain(args []string) int {
	err := confine.RunLayer(args)
	code := confine.ExitLayer
	var ce *confine.Error
	if errors.As(err, &ce) {
		code = ce.Code
	}
	fmt.Fprintf(os.Stderr, "kusaw: %v\n", err)
	return code
}

// newLayer makes a write layer's folders, as worktree.NewLayer does, and
// removes them after the test (before the fixture: overlayfs leaves
// work/work without permissions, which os.RemoveAll cannot enter as a
// normal user).
func newLayer(t testing.TB, dir string) string {
	t.Helper()
	t.Cleanup(func() { rmtree.RemoveAll(dir) })
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The stage's argv, in order: program, subcommand, one -l triple per
// layer in the plan's order, "--", then bwrap's argv untouched.
func TestLayerArgvOrder(t *testing.T) {
	ls := []confine.Layer{{Tree: "/a/wt", Upper: "/a/l/upper", Work: "/a/l/work"}, {Tree: "/b/wt", Upper: "/b/l/upper", Work: "/b/l/work"}}
	got := layerArgv("/opt/k/kusaw-bridge", ls, []string{"/usr/bin/bwrap", "--unshare-all", "--", "/bin/sh", "-l"})
	want := []string{"/opt/k/kusaw-bridge", "__layer", "-l", "/a/wt", "/a/l/upper", "/a/l/work", "-l", "/b/wt", "/b/l/upper", "/b/l/work",
		"--", "/usr/bin/bwrap", "--unshare-all", "--", "/bin/sh", "-l"}
	if !slices.Equal(got, want) {
		t.Fatalf("argv\n got %q\nwant %q", got, want)
	}
	back, argv, err := confine.ParseLayer(got[2:])
	if err != nil || !slices.Equal(back, ls) || !slices.Equal(argv, want[11:]) {
		t.Fatalf("ParseLayer gives %v %q %v, want the layers and bwrap's argv back", back, argv, err)
	}
	o, err := ls[0].Options()
	if want := "lowerdir=/a/wt,upperdir=/a/l/upper,workdir=/a/l/work,userxattr"; err != nil || o != want {
		t.Fatalf("options %q (%v), want %q", o, err, want)
	}
	var a syscall.SysProcAttr
	layerAttr(&a, 1000, 1001)
	if a.Cloneflags != syscall.CLONE_NEWUSER|syscall.CLONE_NEWNS || len(a.UidMappings) != 1 || a.UidMappings[0] != (syscall.SysProcIDMap{ContainerID: 1000, HostID: 1000, Size: 1}) ||
		len(a.GidMappings) != 1 || a.GidMappings[0] != (syscall.SysProcIDMap{ContainerID: 1001, HostID: 1001, Size: 1}) || a.GidMappingsEnableSetgroups ||
		!slices.Equal(a.AmbientCaps, confine.LayerCaps) {
		t.Fatalf("the stage's start: %+v; want its own user and mount namespace, only the user mapped, setgroups denied, LayerCaps ambient", a)
	}
}

// Bad stage arguments are refused before anything is mounted.
func TestLayerArgsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-l", "/t", "/u"},
		{"-l", "/t", "/u", "/w", "--", "bwrap"},
		{"-l", "/t", "/u", "/w", "--"},
		{"--", "/usr/bin/bwrap"},
		{"-l", "/t,lowerdir=/etc", "/u", "/w", "--", "/usr/bin/bwrap"},
		{"-l", "/t:/etc", "/u", "/w", "--", "/usr/bin/bwrap"},
		{"-l", "t", "/u", "/w", "--", "/usr/bin/bwrap"},
		{"-x"},
	} {
		if _, _, err := confine.ParseLayer(args); err == nil {
			t.Errorf("ParseLayer(%q) accepted", args)
		}
	}
}

// The plan: a writable worktree's layer is in the plan and named in its
// notes; every misuse is refused with a fix, the layer inside a folder
// the sandbox shows included (the step could then write the upper layer
// behind the overlay's back).
func TestPlanWriteLayer(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.Worktrees[0].Layer = newLayer(t, filepath.Join(f.attempt, "layer-1"))
	p := mustPlan(t, in)
	want := confine.Layer{Tree: f.wt, Upper: filepath.Join(f.attempt, "layer-1", "upper"), Work: filepath.Join(f.attempt, "layer-1", "work")}
	if len(p.WriteLayers) != 1 || p.WriteLayers[0] != want {
		t.Fatalf("write layers %+v, want %+v", p.WriteLayers, want)
	}
	if !strings.Contains(string(p.JSON()), `"write_layers":[{"tree":"`+f.wt+`"`) || !strings.Contains(p.String(), "write layer "+want.Upper) {
		t.Errorf("doctor's plan does not show the layer:\n%s\n%s", p.JSON(), p.String())
	}
	for _, m := range p.Mounts {
		if within(filepath.Join(f.attempt, "layer-1"), m.Src) {
			t.Fatalf("the plan mounts %s from the layer", m.Src)
		}
	}
	refused := func(name, substr string, edit func(*Input)) {
		t.Run(name, func(t *testing.T) {
			in := f.input()
			edit(&in)
			wantRefused(t, in, substr)
		})
	}
	refused("read-only", "read-only worktree", func(in *Input) {
		in.Worktrees[0].Layer = newLayer(t, filepath.Join(f.attempt, "layer-2"))
		in.Worktrees[0].Writable = false
	})
	refused("relative", "not absolute", func(in *Input) { in.Worktrees[0].Layer = "layer-1" })
	refused("no upper", "not a folder", func(in *Input) {
		in.Worktrees[0].Layer = filepath.Join(f.attempt, "layer-3")
		os.MkdirAll(filepath.Join(f.attempt, "layer-3", "work"), 0o700)
	})
	refused("upper a link", "not a folder", func(in *Input) {
		d := filepath.Join(f.attempt, "layer-4")
		os.MkdirAll(filepath.Join(d, "work"), 0o700)
		os.Symlink(f.artifacts, filepath.Join(d, "upper"))
		in.Worktrees[0].Layer = d
	})
	refused("in the worktree", "lie in one another", func(in *Input) { in.Worktrees[0].Layer = newLayer(t, filepath.Join(f.wt, "layer")) })
	refused("in artifacts", "would be visible in the sandbox", func(in *Input) { in.Worktrees[0].Layer = newLayer(t, filepath.Join(f.artifacts, "layer")) })
	refused("in allow_write", "would be visible in the sandbox", func(in *Input) {
		d := filepath.Join(f.root, "cache")
		in.AllowWrite = append(in.AllowWrite, d)
		in.Worktrees[0].Layer = newLayer(t, filepath.Join(d, "layer"))
	})
	refused("comma", "comma", func(in *Input) { in.Worktrees[0].Layer = newLayer(t, filepath.Join(f.attempt, "layer,x")) })
}

// check --verbose's write-layer line: active here, and not active, with
// the reason, where no layer can be made (the check fails closed).
func TestWriteLayerState(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "the check mounts a real layer and runs bwrap on it")
	dir := t.TempDir()
	if l := WriteLayerState(dir); !l.Active || l.Name != "write-layer" || !strings.Contains(l.Detail, dir) {
		t.Fatalf("here: %+v", l)
	}
	gone := filepath.Join(dir, "missing")
	if l := WriteLayerState(gone); l.Active || !strings.Contains(l.Detail, "cannot be used here") || !strings.Contains(l.Detail, "refused") || strings.Contains(l.Detail, "\n") {
		t.Fatalf("in a missing folder: %+v", l)
	}
}

// The stage checks the layer's folders again right before it mounts
// (the mount follows links): an upper swapped for a link after the plan
// was made is refused, and nothing runs; the twin with the real folder
// runs the command.
func TestLayerStageRefusesLink(t *testing.T) {
	prog := confineProgram()
	if prog == nil {
		t.Fatal("no stage program")
	}
	dir := t.TempDir()
	tree, elsewhere := filepath.Join(dir, "tree"), filepath.Join(dir, "elsewhere")
	os.Mkdir(tree, 0o700)
	os.Mkdir(elsewhere, 0o700)
	layer := newLayer(t, filepath.Join(dir, "layer"))
	run := func() (string, error) {
		cmd := exec.Command(prog[0])
		cmd.Args = layerArgv(prog[0], []confine.Layer{{Tree: tree, Upper: filepath.Join(layer, "upper"), Work: filepath.Join(layer, "work")}},
			[]string{"/bin/sh", "-c", `echo ran > "$0/f"`, tree})
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		layerAttr(cmd.SysProcAttr, os.Geteuid(), os.Getegid())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil {
		t.Fatalf("the twin with real folders: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(layer, "upper", "f")); string(b) != "ran\n" {
		t.Fatalf("the twin's write is not in the upper layer: %q", b)
	}
	os.RemoveAll(filepath.Join(layer, "upper"))
	os.Symlink(elsewhere, filepath.Join(layer, "upper"))
	out, err := run()
	if err == nil || !strings.Contains(out, "not a folder reached without links") {
		t.Fatalf("an upper swapped for a link: %v\n%s", err, out)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "f")); err == nil {
		t.Fatal("the command ran and wrote where the link points")
	}
}

// Two worktrees, two layers: the stage mounts both before it execs, and
// each tree's write lands in its own upper layer, the trees untouched.
func TestLayerStageTwoLayers(t *testing.T) {
	prog := confineProgram()
	if prog == nil {
		t.Fatal("no stage program")
	}
	dir := t.TempDir()
	var ls []confine.Layer
	for _, n := range []string{"a", "b"} {
		tree := filepath.Join(dir, n)
		os.Mkdir(tree, 0o700)
		write(t, filepath.Join(tree, "f"), "lower "+n+"\n")
		l := newLayer(t, filepath.Join(dir, "layer-"+n))
		ls = append(ls, confine.Layer{Tree: tree, Upper: filepath.Join(l, "upper"), Work: filepath.Join(l, "work")})
	}
	cmd := exec.Command(prog[0])
	cmd.Args = layerArgv(prog[0], ls, []string{"/bin/sh", "-c", `echo upper a > "$0/f" && echo upper b > "$1/f"`, ls[0].Tree, ls[1].Tree})
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	layerAttr(cmd.SysProcAttr, os.Geteuid(), os.Getegid())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for i, n := range []string{"a", "b"} {
		if b, _ := os.ReadFile(filepath.Join(ls[i].Upper, "f")); string(b) != "upper "+n+"\n" {
			t.Errorf("layer %s: upper holds %q", n, b)
		}
		if b, _ := os.ReadFile(filepath.Join(ls[i].Tree, "f")); string(b) != "lower "+n+"\n" {
			t.Errorf("tree %s changed: %q", n, b)
		}
	}
}

// Run outside the namespace kusaw makes for it (by hand, as root), the
// stage would make the host's mounts private and mount there: it refuses,
// and runs nothing. The twin (the namespace) runs: the other stage tests.
func TestLayerStageRefusesHostNamespace(t *testing.T) {
	prog := confineProgram()
	if prog == nil {
		t.Fatal("no stage program")
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.Mkdir(tree, 0o700)
	layer := newLayer(t, filepath.Join(dir, "layer"))
	cmd := exec.Command(prog[0])
	cmd.Args = layerArgv(prog[0], []confine.Layer{{Tree: tree, Upper: filepath.Join(layer, "upper"), Work: filepath.Join(layer, "work")}},
		[]string{"/bin/sh", "-c", `echo ran > "$0/f"`, tree})
	if os.Geteuid() == 0 {
		// A mount namespace of the test's own (the initial user
		// namespace's still): should the guard ever go, the mounts it
		// lets through stay out of this machine's.
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not in a user namespace of its own") {
		t.Fatalf("the stage in the host's namespaces: %v\n%s", err, out)
	}
	if _, err := os.Lstat(filepath.Join(tree, "f")); err == nil {
		t.Fatal("the command ran")
	}
	if mounted(t, tree) {
		t.Fatal("the overlay is mounted in the host's namespace")
	}
}
