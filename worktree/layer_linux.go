//go:build linux

package worktree

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kusaw/kusaw/internal/rmtree"
	"golang.org/x/sys/unix"
)

// The write layer (docs/factory.md, "Worktree reuse", repos.NAME.
// write_layer: overlay). A sandboxed step sees its tree as an overlay:
// the tree read-only underneath, its writes in an upper layer kusaw made
// outside the tree. Afterwards kusaw moves the upper's entries into the
// tree and knows, from the upper alone, every path the step changed: the
// commit stages those and Release reverts those, neither walking the tree,
// and the next take of the tree skips its cleaning walk too.
//
// The upper is the step's: its names, types, links, modes and extended
// attributes are hostile input. It is read by descriptor, never through a
// link; the tree is changed only relative to descriptors of its folders
// opened from the root with openat2's RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS
// (a link the tree tracks may point anywhere: none is ever traversed),
// and every change there is a rename, unlink, mkdir or chmod of one name
// in such a folder, none of which follows its last component.

// NewLayer makes the folders of a write layer for the tree: upper/ (with
// the mode of the tree's root, which the overlay's root shows) and work/,
// both empty, in a private folder beside the tree (the attempt's
// worktrees folder: same filesystem, so ApplyLayer renames; outside the
// tree and the state folder, which no sandbox sees; gone with the
// attempt's worktrees after a crash). Refused when the tree is not
// exactly its checkout (a merge started in it) or kusaw holds no trusted
// index of it (nothing to compare the layer with).
func (w *Worktree) NewLayer() (string, error) {
	switch {
	case w.layer != "":
		return "", fmt.Errorf("write layer for %s: it has one already (%s)", w.Path, w.layer)
	case w.index == "":
		return "", fmt.Errorf("write layer for %s: kusaw keeps no index of its checkout (no state folder)", w.Path)
	case len(w.MergeParents) > 0:
		return "", fmt.Errorf("write layer for %s: a merge was started in the tree, whose files are then not its checkout's", w.Path)
	case len(w.Sparse) > 0:
		return "", fmt.Errorf("write layer for %s: a sparse worktree's commit keeps what is outside its folders, not a layer's", w.Path)
	}
	var tree unix.Stat_t
	if err := unix.Lstat(w.Path, &tree); err != nil || tree.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", fmt.Errorf("write layer for %s: the tree is missing or not a folder (%v)", w.Path, err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(w.Path), "layer-") // 0700
	if err != nil {
		return "", fmt.Errorf("write layer for %s: %v", w.Path, err)
	}
	fail := func(err error) (string, error) {
		_ = forceRemoveAll(dir)
		return "", fmt.Errorf("write layer for %s: %v", w.Path, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fail(err)
	}
	if st.Dev != tree.Dev {
		return fail(fmt.Errorf("%s is on another filesystem than the tree", dir))
	}
	for _, sub := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "upper"), os.FileMode(tree.Mode&0o777)); err != nil {
		return fail(err)
	}
	w.layer = dir
	return dir, nil
}

// Layer is the write layer NewLayer made and ApplyLayer has not applied
// yet ("" when none).
func (w *Worktree) Layer() string { return w.layer }

// ApplyLayer moves what the step wrote into the write layer dir (made by
// NewLayer; no process of the step runs any more) into the tree, keeps
// the paths it changed as the commit's survey, and removes dir. Per entry
// of the upper: a whiteout (a character device 0/0) removes the path from
// the tree; a folder marked opaque replaces the tree's folder; a regular
// file or link is renamed into the tree, replacing whatever is there; a
// plain folder is made (or kept) and gets the upper's mode; a FIFO,
// socket or device is dropped (and what it hid goes: the step saw it
// gone), as is any .git entry (git never adds one; the tree's own .git is
// kusaw's). A file with a hard link outside the upper fails the apply
// (foreignLinks). An error leaves the tree part applied and no survey: the
// commit must not take it for the step's work.
func (w *Worktree) ApplyLayer(dir string) error {
	if w.layer == "" || filepath.Clean(dir) != w.layer {
		return fmt.Errorf("apply write layer %s: not the layer made for %s", dir, w.Path)
	}
	w.survey, w.layerSurvey, w.LayerDropped = nil, nil, nil
	sv, err := w.applyLayer(dir)
	if rerr := forceRemoveAll(dir); rerr != nil && err == nil {
		err = fmt.Errorf("remove write layer %s: %v", dir, rerr)
	}
	w.layer = ""
	if err != nil {
		return fmt.Errorf("apply write layer of %s: %v", w.Path, err)
	}
	w.survey, w.layerSurvey = sv, sv
	return nil
}

// layerEntry is one path the upper changed in the tree.
type layerEntry struct {
	path string
	kind byte   // 'd' folder kept, 'D' folder made anew, 'f' file or link moved in, 'x' gone
	mode uint32 // folders: the mode given
}

type applier struct {
	entries []layerEntry
	dropped []Finding
	// Paths kusaw wrote (NoteWritten: the sandbox's stand-in mount
	// points, which bwrap may make through the overlay), and the folders
	// above them: an empty folder or empty file the upper has there is
	// kusaw's, not the step's, and is not carried into the tree.
	kusaw, above map[string]bool
	// Regular files with more than one link, by inode: how many links
	// the upper holds and where they went in the tree (linked).
	links map[uint64]*linked
}

// linked is one inode with several links seen in the upper.
type linked struct {
	nlink uint64
	paths []string
}

func (w *Worktree) applyLayer(dir string) (*survey, error) {
	const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	root, err := unix.Open(w.Path, dirFlags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: w.Path, Err: err}
	}
	defer unix.Close(root)
	upper, err := unix.Open(filepath.Join(dir, "upper"), dirFlags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, "upper"), Err: err}
	}
	defer unix.Close(upper)
	var ust, tst unix.Stat_t
	if err := unix.Fstat(upper, &ust); err != nil {
		return nil, err
	}
	if err := unix.Fstat(root, &tst); err != nil {
		return nil, err
	}
	if ust.Dev != tst.Dev {
		return nil, errors.New("the layer is on another filesystem than the tree")
	}
	a := &applier{kusaw: map[string]bool{}, above: map[string]bool{}, links: map[uint64]*linked{}}
	for _, n := range w.noted {
		a.kusaw[n] = true
		for d := path.Dir(n); d != "." && d != "/"; d = path.Dir(d) {
			a.above[d] = true
		}
	}
	a.entries = append(a.entries, layerEntry{path: "", kind: 'd', mode: ust.Mode & 0o7777})
	err = a.folder(upper, root, "")
	if ferr := a.foreignLinks(root); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	if tst.Mode&0o7777 != ust.Mode&0o7777 {
		if err := unix.Fchmod(root, ust.Mode&0o7777); err != nil {
			return nil, err
		}
	}
	w.LayerDropped = a.dropped
	return w.layerSurveyOf(a.entries)
}

// beneath opens folder name in the tree's folder dirfd, never through a
// link (nor a magic link, nor out of dirfd).
func beneath(dirfd int, name string) (int, error) {
	return unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// names lists the folder open as fd (the descriptor stays open).
func names(fd int) ([]string, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "layer")
	defer f.Close()
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// folder applies the entries of the upper's folder u (rel in the tree) to
// the tree's folder t.
func (a *applier) folder(u, t int, rel string) error {
	ns, err := names(u)
	if err != nil {
		return err
	}
	for _, name := range ns {
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		if strings.EqualFold(name, ".git") {
			a.dropped = append(a.dropped, Finding{Path: p, Kind: "write layer: .git entry", Action: "dropped"})
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(u, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		if a.kusaw[p] && (st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0 || st.Mode&unix.S_IFMT == unix.S_IFDIR && emptyAt(u, name)) {
			continue // a stand-in mount point bwrap made
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := a.subfolder(u, t, name, p, &st); err != nil {
				return err
			}
		case unix.S_IFREG, unix.S_IFLNK:
			if st.Mode&unix.S_IFMT == unix.S_IFREG {
				if err := overlayXattrs(u, name, &st); err != nil {
					return fmt.Errorf("%s: %v", p, err)
				}
			}
			if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
				l := a.links[st.Ino]
				if l == nil {
					l = &linked{nlink: uint64(st.Nlink)}
					a.links[st.Ino] = l
				}
				l.paths = append(l.paths, p)
			}
			var tst unix.Stat_t
			if err := unix.Fstatat(t, name, &tst, unix.AT_SYMLINK_NOFOLLOW); err == nil && tst.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := rmtree.RemoveAt(t, name); err != nil {
					return fmt.Errorf("%s: %v", p, err)
				}
			}
			if err := unix.Renameat(u, name, t, name); err != nil {
				return fmt.Errorf("%s: rename into the tree: %v", p, err)
			}
			a.entries = append(a.entries, layerEntry{path: p, kind: 'f'})
		default:
			if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
				// A FIFO, socket or device: never carried into the tree.
				a.dropped = append(a.dropped, Finding{Path: p, Kind: "write layer: " + kindOfStat(st.Mode), Action: "dropped"})
			}
			// A whiteout (or what the step saw in place of the path).
			if err := rmtree.RemoveAt(t, name); err != nil {
				return fmt.Errorf("%s: %v", p, err)
			}
			a.entries = append(a.entries, layerEntry{path: p, kind: 'x'})
		}
	}
	return nil
}

// foreignLinks refuses a file of the upper with a link the upper does not
// hold: a hard link to a file of the tree underneath, or of the host on
// the same filesystem (the upper is the step's to forge). Moved into the
// tree it would be that file: the commit would read it and the next step
// write it. A link the step made between files it wrote (ln a b through
// the overlay: both in the upper) is its own. The refused file's paths
// are taken out of the tree again (the apply fails, and the tree is
// walked at its next take); also when the walk stopped early, whose
// counts are then short.
func (a *applier) foreignLinks(root int) error {
	var bad []string
	for ino, l := range a.links {
		if uint64(len(l.paths)) >= l.nlink {
			continue
		}
		bad = append(bad, l.paths...)
		for _, p := range l.paths {
			unlinkIno(root, p, ino)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%s: a hard link to a file outside the write layer (of the tree underneath or of the host), which the overlay never makes: refused, so the tree is not committed (a link between files the step wrote is kept)", strings.Join(bad, ", "))
}

// unlinkIno removes p from the tree if it is still inode ino, never
// through a link.
func unlinkIno(root int, p string, ino uint64) {
	d := root
	if dir := path.Dir(p); dir != "." {
		fd, err := beneath(root, dir)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		d = fd
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Ino == ino {
		_ = unix.Unlinkat(d, path.Base(p), 0)
	}
}

func kindOfStat(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "device"
}

// subfolder applies the upper's folder name (in u) to the tree's folder
// t: made anew when opaque or when the tree has no folder there (a file,
// a link: removed, never followed), and given the upper's mode after its
// entries (a folder the step made unwritable still gets them).
func (a *applier) subfolder(u, t int, name, p string, st *unix.Stat_t) error {
	if st.Mode&0o700 != 0o700 {
		// The upper is kusaw's to read (a folder the step closed).
		if err := unix.Fchmodat(u, name, st.Mode&0o7777|0o700, 0); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
	}
	uf, err := unix.Openat(u, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %v", p, err)
	}
	defer unix.Close(uf)
	opaque := false
	for _, prefix := range []string{"user.overlay.", "trusted.overlay."} {
		if v, ok := fgetxattr(uf, prefix+"opaque"); ok {
			if v != "y" {
				return fmt.Errorf("%s: overlay opaque mark %q is not supported", p, v)
			}
			opaque = true
		}
		if _, ok := fgetxattr(uf, prefix+"redirect"); ok {
			return fmt.Errorf("%s: a folder renamed with the overlay's redirect_dir is not supported (mount with userxattr)", p)
		}
	}
	made := opaque
	tf := -1
	if !made {
		if tf, err = beneath(t, name); err != nil {
			made, tf = true, -1
		}
	}
	if made {
		if err := rmtree.RemoveAt(t, name); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		if err := unix.Mkdirat(t, name, 0o700); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		if tf, err = beneath(t, name); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
	}
	defer unix.Close(tf)
	kind := byte('d')
	if made {
		kind = 'D'
	}
	mode := st.Mode & 0o7777
	a.entries = append(a.entries, layerEntry{path: p, kind: kind, mode: mode})
	n := len(a.entries)
	if err := a.folder(uf, tf, p); err != nil {
		return err
	}
	if made && !opaque && a.above[p] && len(a.entries) == n {
		// Only made for a stand-in below it, which was not carried.
		if err := unix.Unlinkat(t, name, unix.AT_REMOVEDIR); err == nil {
			a.entries = a.entries[:n-1]
			return nil
		}
	}
	var tst unix.Stat_t
	if err := unix.Fstat(tf, &tst); err != nil {
		return err
	}
	if tst.Mode&0o7777 != mode {
		return unix.Fchmod(tf, mode)
	}
	return nil
}

// emptyAt: folder name in dirfd has no entries.
func emptyAt(dirfd int, name string) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	ns, err := names(fd)
	unix.Close(fd)
	return err == nil && len(ns) == 0
}

func fgetxattr(fd int, name string) (string, bool) {
	buf := make([]byte, 256)
	n, err := unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// overlayXattrs refuses a file the overlay keeps only part of in the
// upper (metadata only, its data in the lower; a whiteout by attribute)
// and removes the overlay's bookkeeping from the others (origin and the
// like), which another overlay with this tree underneath would read, and
// the overlay attributes the step set itself (stored escaped). Only a
// file's own attributes reach the tree; a folder's never do (subfolder
// reads its opaque mark, the unescaped one alone).
// By the upper folder's descriptor: never through a link.
func overlayXattrs(u int, name string, st *unix.Stat_t) error {
	p := fmt.Sprintf("/proc/self/fd/%d/%s", u, name)
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		return nil
	}
	buf := make([]byte, n)
	if n, err = unix.Llistxattr(p, buf); err != nil {
		return nil
	}
	opened := false
	defer func() {
		if opened {
			_ = unix.Fchmodat(u, name, st.Mode&0o7777, 0)
		}
	}()
	for _, x := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		short, ok := strings.CutPrefix(x, "user.overlay.")
		if !ok {
			short, ok = strings.CutPrefix(x, "trusted.overlay.")
		}
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(short, "overlay."):
			// Escaped (Linux 6.7 on): an attribute the step set through
			// the overlay under the overlay's own name, which means
			// nothing to the tree, and would to an overlay over it.
		case short == "origin", short == "impure", short == "nlink", short == "uuid", short == "protattr":
		default:
			return fmt.Errorf("overlay attribute %s is not supported (mount with userxattr, without metacopy)", x)
		}
		err := unix.Lremovexattr(p, x)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			if !opened {
				opened = true
				if cerr := unix.Fchmodat(u, name, st.Mode&0o7777|0o600, 0); cerr != nil {
					return cerr
				}
			}
			err = unix.Lremovexattr(p, x)
		}
		if err != nil {
			return fmt.Errorf("remove %s: %v", x, err)
		}
	}
	return nil
}

// DropLayer removes a write layer that is not to be applied (the step
// never ran, or the attempt gave up on it): the tree stays as it was.
func (w *Worktree) DropLayer() error {
	if w.layer == "" {
		return nil
	}
	err := forceRemoveAll(w.layer)
	w.layer = ""
	return err
}
