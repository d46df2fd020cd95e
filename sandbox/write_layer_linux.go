package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kusaw/kusaw/internal/rmtree"
	"github.com/kusaw/kusaw/sandbox/confine"
	"github.com/kusaw/kusaw/status"
)

// layerArgv is the argv that mounts the layers and then runs bwrap: the
// stage's program, its subcommand and layers, "--", bwrap and its args.
func layerArgv(prog string, layers []confine.Layer, bwrap []string) []string {
	return append([]string{prog}, confine.LayerArgs(layers, bwrap)...)
}

// layerAttr starts the stage in a user and mount namespace of its own,
// mapping only the running user (as bwrap does), with the capabilities
// an overlay mount needs there as ambient ones; the stage lets go of them
// before it execs bwrap.
func layerAttr(a *syscall.SysProcAttr, uid, gid int) {
	a.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	a.GidMappingsEnableSetgroups = false
	a.AmbientCaps = append([]uintptr{}, confine.LayerCaps...)
}

// wrapLayers turns cmd, a bwrap command of plan p, into the write-layer
// stage that mounts p's layers and then execs that bwrap.
func (p *Plan) wrapLayers(cmd *exec.Cmd) error {
	if len(p.WriteLayers) == 0 {
		return nil
	}
	prog := confineProgram()
	if prog == nil {
		return &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: "sandbox: the write layer needs kusaw-bridge (or kusaw) to mount it, and this program has neither",
			Fix: "put kusaw-bridge beside " + executable() + " (make build puts both in bin/), or set the repo's write_layer: none"}
	}
	cmd.Args = layerArgv(prog[0], p.WriteLayers, append([]string{cmd.Path}, cmd.Args[1:]...))
	cmd.Path = prog[0]
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	layerAttr(cmd.SysProcAttr, os.Geteuid(), os.Getegid())
	return nil
}

var (
	layerCheckMu sync.Mutex
	layerChecks  = map[string]layerCheck{}
)

// layerCheck is a remembered CheckLayer: a pass for the process's life, a
// failure for layerRecheck (it may have been a full disk for a moment).
type layerCheck struct {
	err error
	at  time.Time
}

const layerRecheck = time.Minute

// CheckLayer says whether a write layer can be used here, for layers made
// in folder dir (the state folder: its filesystem must take an overlay's
// upper layer): it mounts one over a small tree and runs bwrap on it, a
// step that writes a file and removes one, and checks that the changes
// are in the upper layer and the tree is untouched. A few milliseconds;
// remembered for the process per folder, a failure for a minute (a
// passed check on disk would outlive a kernel or mount change; the real
// start then reports it, and the step does not run).
func CheckLayer(dir string) error {
	layerCheckMu.Lock()
	defer layerCheckMu.Unlock()
	if c, ok := layerChecks[dir]; ok && (c.err == nil || time.Since(c.at) < layerRecheck) {
		return c.err
	}
	err := checkLayer(dir)
	layerChecks[dir] = layerCheck{err, time.Now()}
	return err
}

func checkLayer(dir string) error {
	fail := func(why string) error {
		return &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: "sandbox: the write layer cannot be used here: " + why,
			Fix: "set the repo's write_layer: none (or run on Linux 5.11 or later with unprivileged overlay mounts)"}
	}
	bw, err := FindBwrap()
	if err != nil {
		return err
	}
	if confineProgram() == nil {
		return fail("this program has no stage to mount it (kusaw-bridge is not beside " + executable() + ")")
	}
	tmp, err := os.MkdirTemp(dir, ".kusaw-layer-check-")
	if err != nil {
		return fail(err.Error())
	}
	// rmtree: overlayfs leaves work/work with no permissions (and a
	// whiteout in it), which os.RemoveAll cannot enter as a normal user.
	defer rmtree.RemoveAll(tmp)
	tree, upper, work := filepath.Join(tmp, "tree"), filepath.Join(tmp, "l", "upper"), filepath.Join(tmp, "l", "work")
	for _, d := range []string{tree, upper, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail(err.Error())
		}
	}
	for _, f := range []string{"kept", "gone"} {
		if err := os.WriteFile(filepath.Join(tree, f), []byte("lower\n"), 0o600); err != nil {
			return fail(err.Error())
		}
	}
	if out, err := runLayerCheck(bw, confine.Layer{Tree: tree, Upper: upper, Work: work}); err != nil {
		return fail(firstLine(strings.TrimSpace(strings.TrimPrefix(out, "kusaw: "))))
	}
	return layerCheckResult(tree, upper, fail)
}

// runLayerCheck runs the check's step: bwrap on the overlay, writing one
// file and removing the other.
func runLayerCheck(bw string, l confine.Layer) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bargs := []string{bw, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", l.Tree, l.Tree, "--",
		"/bin/sh", "-c", `echo upper > "$0/kept" && rm "$0/gone"`, l.Tree}
	if disableUsernsSupported(bw) {
		bargs = append([]string{bw, "--unshare-user", "--disable-userns"}, bargs[1:]...)
	}
	cmd := exec.CommandContext(ctx, bw)
	cmd.Env = []string{}
	cmd.Args = bargs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Plan{WriteLayers: []confine.Layer{l}}
	if err := p.wrapLayers(cmd); err != nil {
		return err.Error(), err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// layerCheckResult checks what the check's step left: the tree as it
// was, the new content and a whiteout (a character device 0/0) above it.
func layerCheckResult(tree, upper string, fail func(string) error) error {
	for _, f := range []string{"kept", "gone"} {
		if b, err := os.ReadFile(filepath.Join(tree, f)); err != nil || string(b) != "lower\n" {
			return fail("the step's writes reached the tree under the overlay (" + f + ")")
		}
	}
	if b, err := os.ReadFile(filepath.Join(upper, "kept")); err != nil || string(b) != "upper\n" {
		return fail("a file the step wrote is not in the upper layer")
	}
	fi, err := os.Lstat(filepath.Join(upper, "gone"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return fail("a file the step removed left no whiteout in the upper layer")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Rdev != 0 {
		return fail(fmt.Sprintf("a whiteout in the upper layer is not the device 0/0 (%v)", fi.Mode()))
	}
	return nil
}
