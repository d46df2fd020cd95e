//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kusaw/kusaw/internal/bridgebuild"
	"github.com/kusaw/kusaw/internal/rmtree"
	"github.com/kusaw/kusaw/sandbox/confine"
)

// The write layer's stage in C (the constructor, before the Go runtime)
// and in Go (confine.RunLayer, CGO_ENABLED=0) are held to one behaviour:
// the same layer mounted and the same command run, with no capability
// left; the same failures with the same messages and statuses (a command
// that cannot be run, a mount the kernel refuses, an upper swapped for a
// link, the host's own user namespace, bad arguments). The C build runs
// the working case without starting the Go runtime at all.
func TestLayerStageImplementationsAgree(t *testing.T) {
	needStaticCC(t, "the C stage cannot be built")
	if _, err := os.Stat("/dev/shm"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no /dev/shm for the refused mount (a work folder on another filesystem): CI must have it")
		}
		t.Skip("no /dev/shm for the refused mount (a work folder on another filesystem)")
	}
	outputs := map[string]map[string]string{}
	for _, withC := range []bool{true, false} {
		name := map[bool]string{true: "C", false: "Go"}[withC]
		bin := filepath.Join(t.TempDir(), "kusaw-bridge")
		if err := bridgebuild.Build("", bin, withC); err != nil {
			t.Fatal(err)
		}
		outputs[name] = layerStageCases(t, bin, withC)
	}
	for k, c := range outputs["C"] {
		if g := outputs["Go"][k]; g != c {
			t.Errorf("%s:\n C  %q\n Go %q", k, c, g)
		}
	}
}

// layerStageCases runs bin's layer stage in each case and returns its
// exit status and output, the case's folder written as DIR.
func layerStageCases(t *testing.T, bin string, withC bool) map[string]string {
	dir, err := os.MkdirTemp("/var/tmp", "kusaw-layer-stage-")
	if err != nil {
		t.Fatal(err)
	}
	shm, err := os.MkdirTemp("/dev/shm", "kusaw-layer-stage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rmtree.RemoveAll(dir); rmtree.RemoveAll(shm) })
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{tree, filepath.Join(dir, "l", "upper"), filepath.Join(dir, "l", "work"), filepath.Join(shm, "work")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(tree, "f"), []byte("lower\n"), 0o600)
	good := confine.Layer{Tree: tree, Upper: filepath.Join(dir, "l", "upper"), Work: filepath.Join(dir, "l", "work")}
	step := []string{"/bin/sh", "-c", `cat "$0/f" && echo new > "$0/g" && grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status`, tree}
	run := func(ownNS bool, env []string, args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		if ownNS {
			uid, gid := os.Geteuid(), os.Getegid()
			cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
			cmd.SysProcAttr.AmbientCaps = confine.LayerCaps
		} else if os.Geteuid() == 0 {
			// The test's own mount namespace: a stage that failed to
			// refuse could not touch this machine's mounts.
			cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS
		}
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v", err)
		}
		return strings.ReplaceAll(strings.ReplaceAll(string(out), dir, "DIR"), shm, "SHM") + " exit " + string(rune('0'+code/100)) + string(rune('0'+code/10%10)) + string(rune('0'+code%10))
	}
	args := func(l confine.Layer, argv ...string) []string { return confine.LayerArgs([]confine.Layer{l}, argv) }
	got := map[string]string{}
	got["works"] = run(true, nil, args(good, step...)...)
	if b, _ := os.ReadFile(filepath.Join(good.Upper, "g")); string(b) != "new\n" {
		t.Errorf("%s: the step's write is not in the upper layer", bin)
	}
	if b, _ := os.ReadFile(filepath.Join(tree, "f")); string(b) != "lower\n" {
		t.Errorf("%s: the tree changed", bin)
	}
	// Nothing inheritable either, for root too: the process start made
	// LayerCaps inheritable, and an exec keeps that set.
	want := []string{"CapAmb:\t0000000000000000", "CapInh:\t0000000000000000", "lower\n"}
	if os.Geteuid() != 0 {
		// Root is root in kusaw's namespace (as bwrap started by root
		// is); a normal user's command keeps nothing.
		want = append(want, "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000")
	}
	for _, k := range want {
		if !strings.Contains(got["works"], k) {
			t.Errorf("%s: the step's output lacks %q: %s", bin, k, got["works"])
		}
	}
	// The Go runtime's start prints init lines under inittrace: none
	// from the C stage, which execs before it.
	trace := run(true, []string{"GODEBUG=inittrace=1"}, args(good, "/bin/true")...)
	if strings.Contains(trace, "init ") == withC {
		t.Errorf("%s (C stage %v): the Go runtime started: %v\n%s", bin, withC, !withC, trace)
	}
	got["not found"] = run(true, nil, args(good, "/nonexistent/prog")...)
	got["work on another filesystem"] = run(true, nil, args(confine.Layer{Tree: tree, Upper: good.Upper, Work: filepath.Join(shm, "work")}, "/bin/true")...)
	got["host namespace"] = run(false, nil, args(good, "/bin/true")...)
	link := filepath.Join(dir, "link")
	os.Symlink(good.Upper, link)
	got["upper a link"] = run(true, nil, args(confine.Layer{Tree: tree, Upper: link, Work: good.Work}, "/bin/true")...)
	got["bad arguments"] = run(true, nil, "__layer", "-l", tree, "--", "/bin/true")
	got["relative command"] = run(true, nil, args(good, "true")...)
	got["comma"] = run(true, nil, args(confine.Layer{Tree: tree + ",x", Upper: good.Upper, Work: good.Work}, "/bin/true")...)
	return got
}
