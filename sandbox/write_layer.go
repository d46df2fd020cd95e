package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/kusaw/kusaw/sandbox/confine"
	"github.com/kusaw/kusaw/status"
)

// The write layer (Worktree.Layer): kusaw mounts an overlay on the
// worktree's path in a user and mount namespace of its own, before bwrap
// starts (confine.RunLayer), and bwrap's view shows that overlay where the
// worktree is. Every mount the plan puts inside the worktree (the .git
// file, agent settings, hooks, the scripts they name) is bwrap's own, made
// on the overlay as it is made on the tree without a layer: as protected
// either way. The sandbox holds no capability at any point, its seccomp
// filter and Landlock are those of every attempt, and the layer's folders
// are no part of its view (layersHidden).

// writeLayer checks a worktree's layer and adds it to the plan.
func (b *builder) writeLayer(w Worktree, wt string) error {
	if w.Layer == "" {
		return nil
	}
	switch {
	case !w.Writable:
		return refuse("give a write layer only to the attempt's writable worktree", "repo %s: a write layer was given for a read-only worktree", w.Repo)
	case runtime.GOOS != "linux" || b.plan.Backend != "bubblewrap":
		return refuse(fmt.Sprintf("set repos.%s.write_layer: none on this machine", w.Repo), "repo %s: a write layer is an overlay mount, which the %s backend on %s lacks", w.Repo, b.plan.Backend, runtime.GOOS)
	case !filepath.IsAbs(w.Layer):
		return refuse("give an absolute path (worktree.NewLayer makes one)", "repo %s: write layer %q is not absolute", w.Repo, w.Layer)
	}
	dir := resolve(w.Layer)
	if within(dir, wt) || within(wt, dir) {
		return refuse("make the layer outside the worktree (worktree.NewLayer puts it in the attempt folder)", "repo %s: write layer %s and worktree %s lie in one another", w.Repo, dir, wt)
	}
	l := confine.Layer{Tree: wt, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
	if err := layerFolders(w.Repo, l); err != nil {
		return err
	}
	if _, err := l.Options(); err != nil {
		return refuse("use a state_dir and worktree path without commas, colons or backslashes", "repo %s: %s", w.Repo, err.Error())
	}
	if confineProgram() == nil {
		return &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: fmt.Sprintf("sandbox: repo %s's write layer needs kusaw-bridge (or kusaw) to mount it, and this program has neither", w.Repo),
			Fix: "put kusaw-bridge beside " + executable() + " (make build puts both in bin/), or set repos." + w.Repo + ".write_layer: none"}
	}
	b.plan.WriteLayers = append(b.plan.WriteLayers, l)
	b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("repo %s: the step writes into the write layer %s (an overlay on the worktree); renaming a folder that was in the tree fails with EXDEV (mv copies, git mv of a folder fails)", w.Repo, l.Upper))
	return nil
}

// layerFolders checks upper/ and work/: real folders (not links), on one
// filesystem, as overlayfs needs them.
func layerFolders(repo string, l confine.Layer) error {
	var dev [2]uint64
	for i, p := range []string{l.Upper, l.Work} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			return refuse("let kusaw make the layer (worktree.NewLayer)", "repo %s: %s of the write layer is not a folder", repo, p)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			dev[i] = uint64(st.Dev)
		}
	}
	if dev[0] != dev[1] {
		return refuse("make upper/ and work/ in one folder on one filesystem (worktree.NewLayer)", "repo %s: %s and %s of the write layer are on different filesystems", repo, l.Upper, l.Work)
	}
	return nil
}

// layersHidden refuses a plan that would show a layer's folders to the
// step: a mount whose source holds the layer, or lies in it, would let
// the step write the upper layer behind the overlay's back (or read the
// work folder). Checked on the final mounts, whatever part added them.
func (b *builder) layersHidden() error {
	for _, l := range b.plan.WriteLayers {
		dir := filepath.Dir(l.Upper)
		for _, m := range b.plan.Mounts {
			if m.Src == "" || m.Op == "symlink" || m.Src == "/dev/null" {
				continue
			}
			if within(m.Src, dir) || within(dir, m.Src) {
				return refuse("make the layer outside every folder the sandbox shows (worktree.NewLayer puts it in the attempt folder)",
					"the write layer %s would be visible in the sandbox through %s (%s)", dir, m.Src, m.Reason)
			}
		}
	}
	return nil
}
