package confine

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// LayerCaps are the capabilities the stage needs in its own user
// namespace, as ambient capabilities from the process start: mounting the
// overlay needs both (without CAP_DAC_OVERRIDE the kernel refuses it).
// They hold for files of the one mapped user only, and go before bwrap.
var LayerCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE}

// RunLayer mounts the layers and execs the command; it returns only on
// failure, and then nothing has run.
func RunLayer(args []string) error {
	layers, argv, err := ParseLayer(args)
	if err != nil {
		return err
	}
	if !ownUserNamespace() {
		return &Error{ExitLayer, "layer: not in a user namespace of its own (kusaw starts this stage in one; run by hand it would change the host's mounts)"}
	}
	// Ambient capabilities are a thread's: the one that lets go of them
	// is the one that execs.
	runtime.LockOSThread()
	// Nothing mounted here reaches the host's mount namespace (a namespace
	// of a user namespace already receives only; private says so outright).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return layerErr("making the mounts private", "", err)
	}
	for _, l := range layers {
		if err := mountLayer(l); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return layerErr("letting go of the ambient capabilities", "", err)
	}
	if err := dropCaps(); err != nil {
		return layerErr("letting go of the capabilities", "", err)
	}
	err = syscall.Exec(argv[0], argv, os.Environ())
	return &Error{ExitNoExec, fmt.Sprintf("layer: cannot run %s: %v", argv[0], err)}
}

// dropCaps empties the thread's effective, permitted and inheritable
// sets. Ambient capabilities must be inheritable, so the process start
// left LayerCaps inheritable, and an exec keeps that set: bwrap, and
// whatever runs after it, would hold them ready for any program with
// file capabilities. Nothing after the mounts needs one (root in kusaw's
// namespace gets its own again from the exec, as bwrap started by root
// does).
func dropCaps() error {
	var data [2]unix.CapUserData
	return unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0])
}

// mountLayer mounts one overlay on its tree and checks that it is there.
func mountLayer(l Layer) error {
	opts, err := l.Options()
	if err != nil {
		return err
	}
	// The plan checked these folders; they are checked again right before
	// the mount, which follows links: an upper swapped for a link would
	// send the step's writes wherever it points.
	for _, p := range []string{l.Tree, l.Upper, l.Work} {
		if r, err := filepath.EvalSymlinks(p); err != nil || r != p {
			why := fmt.Sprint(err)
			if err == nil {
				why = "it leads to " + r
			}
			return &Error{ExitLayer, fmt.Sprintf("layer: %s is not a folder reached without links (%s); kusaw makes the layer anew for the next attempt", p, why)}
		}
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			return &Error{ExitLayer, "layer: " + p + " is not a folder"}
		}
	}
	if err := unix.Mount("overlay", l.Tree, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return layerErr("mounting the write layer on", l.Tree, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(l.Tree, &fs); err != nil || fs.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return &Error{ExitLayer, "layer: " + l.Tree + " is not an overlay after mounting it"}
	}
	return nil
}

func layerErr(what, path string, err error) error {
	if path != "" {
		what += " " + path
	}
	msg := fmt.Sprintf("layer: %s: %v", what, err)
	if err == unix.EPERM || err == unix.EACCES || err == unix.EINVAL {
		msg += " (the kernel refused an overlay in kusaw's user namespace; kusaw sandbox check --verbose says whether the write layer works here, or set write_layer: none)"
	}
	return &Error{ExitLayer, msg}
}

// ownUserNamespace says whether this process is outside the initial user
// namespace, whose uid map is the whole identity: the stage makes "/"
// private and mounts, which there would be the host's.
func ownUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(b)), " ") != "0 0 4294967295"
}
