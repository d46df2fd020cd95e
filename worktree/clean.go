package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cleaning a reused tree (docs/factory.md, "Worktree reuse"). The tree is
// what a step left: hostile input. It is compared with the trusted index of
// its last checkout by kusaw, and what this keeps is only what provably is
// still the file kusaw's git wrote: the same inode, never changed since
// (ctime cannot be set by a process; chmod, chown, link, xattrs and every
// write move it), no other name. Everything else goes, and git writes it
// again: a path the index does not name (untracked or ignored, a nested
// repository, a FIFO, a socket), an entry of another type than the index's
// (a link or file where a folder was), a tracked file with any change.
// Folders get the mode a checkout gives them and lose extended attributes
// (a default ACL would set the modes of the files checked out into them).
// No process of the step runs any more, so nothing changes under the walk;
// it still never follows a link.

// CleanReport counts what cleaning a reused tree removed or repaired.
type CleanReport struct {
	Untracked int `json:"untracked,omitempty"` // paths the index does not name (ignored files too), removed with what is below them
	Replaced  int `json:"replaced,omitempty"`  // tracked paths of another type than the index's, removed
	Changed   int `json:"changed,omitempty"`   // tracked files or links changed since kusaw's checkout, removed and checked out again
	Folders   int `json:"folders,omitempty"`   // folders whose mode or extended attributes were reset
}

// Total is the number of paths that were not as kusaw left them.
func (c CleanReport) Total() int { return c.Untracked + c.Replaced + c.Changed + c.Folders }

// cleanMode is what a walk of a tree does with what is not as the
// trusted index has it.
type cleanMode int

const (
	// cleanFull, at take: every tracked file's stat data too; all of it
	// goes (the tracked paths to check out again).
	cleanFull cleanMode = iota
	// cleanQuick, at a release without a survey: only what a folder
	// listing tells (paths the index does not name, entries of another
	// type, folders' modes), so that nothing of that kind waits in the
	// pool; the full cleaning at the next take does the rest.
	cleanQuick
	// cleanSurvey, at the commit: as thorough as cleanFull, but nothing
	// changes (but for a folder the step made unreadable to its owner,
	// which must be read: git skips such a folder with a warning, and the
	// commit would silently lose what is in it); what it finds is what
	// the commit gives git to stage and what Release then removes,
	// neither walking the tree again.
	cleanSurvey
)

// survey is what a walk of an attempt's tree at its commit found not as
// the trusted index of its checkout has it (the tree unchanged).
type survey struct {
	changed   []string // tracked paths changed, deleted or of another type; a submodule's folder not empty
	untracked []string // paths the index does not name, outermost (not .git: git never adds one); which are ignored is git's to tell
	remove    []string // what Release removes: untracked and ignored paths, .git entries, entries of another type, a submodule folder's content
	folders   []string // folders whose mode or extended attributes Release resets, each after the folder above it
	// A write layer's survey (layerSurveyOf): what the step changed is
	// known without a walk, and Release removes every path it changed,
	// tracked ones too, so that the tree is its checkout again but for
	// restore, the tracked entries the next take checks out.
	layer   bool
	restore []string
}

// cleanTree cleans (or, in cleanSurvey, surveys) root against idx.
// restore lists the tracked entries it removed (to check out again from
// the index).
func cleanTree(root string, idx *trustedIndex, mode cleanMode) (restore []string, rep CleanReport, sv *survey, err error) {
	files, dirs := idx.lookup()
	c := &cleaner{root: root, mode: mode, files: files, dirs: dirs, idx: idx, seen: make([]bool, len(idx.entries)), dirMode: 0o777 &^ processUmask(), fileMode: 0o666 &^ processUmask()}
	if mode == cleanSurvey {
		c.sv, c.replaced = &survey{}, map[string]bool{}
	}
	if err := c.fixDir(root, ""); err != nil {
		return nil, rep, nil, err
	}
	if err := c.walkAll(); err != nil {
		return nil, c.rep, nil, err
	}
	// What the step deleted, and what was below a folder it replaced.
	for i := range idx.entries {
		if !c.seen[i] && !c.belowReplaced(idx.entries[i].name) {
			c.found(&c.rep.Changed, idx.entries[i].name)
		}
	}
	return c.restore, c.rep, c.sv, nil
}

type cleaner struct {
	root              string
	mode              cleanMode
	files             map[string]int32 // entry of each tracked path
	seen              []bool           // entries found in the tree (kept or restored)
	dirs              map[string]bool
	idx               *trustedIndex
	dirMode, fileMode uint32
	mu                sync.Mutex // guards restore, rep and sv, and the walk's queue
	restore           []string
	rep               CleanReport
	sv                *survey         // cleanSurvey's findings
	replaced          map[string]bool // cleanSurvey: tracked folders found to be something else

	queue   []string // folders waiting for a walker
	pending int      // folders queued or being walked
	err     error
	wake    *sync.Cond
}

// found counts a path not as kusaw left it, and the tracked path to
// check out again, if any (in cleanSurvey: to stage).
func (c *cleaner) found(n *int, restore string) {
	c.mu.Lock()
	*n++
	if restore != "" {
		if c.sv != nil {
			c.sv.changed = append(c.sv.changed, restore)
		} else {
			c.restore = append(c.restore, restore)
		}
	}
	c.mu.Unlock()
}

// noted is cleanSurvey's record of a path: to stage as untracked (when
// untracked), and for Release to remove (when remove).
func (c *cleaner) noted(p string, untracked, remove bool) {
	c.mu.Lock()
	if untracked {
		c.sv.untracked = append(c.sv.untracked, p)
	}
	if remove {
		c.sv.remove = append(c.sv.remove, p)
	}
	c.mu.Unlock()
}

// drop removes path full, whose place in the tree is p, or in cleanSurvey
// notes it for Release; untracked: a path the index does not name, for
// the commit to stage.
func (c *cleaner) drop(full, p string, untracked bool) error {
	if c.sv != nil {
		c.noted(p, untracked && pathBase(p) != ".git", true)
		return nil
	}
	return forceRemoveAll(full)
}

// belowReplaced: p is below a folder cleanSurvey staged as replaced.
func (c *cleaner) belowReplaced(p string) bool {
	for len(c.replaced) > 0 {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		if p = p[:i]; c.replaced[p] {
			return true
		}
	}
	return false
}

func pathBase(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// walkAll walks the tree from the root with a walker
// per processor: most of the cleaning is a stat of each file, which
// folders can have side by side (as git's own preloading of the index
// does).
func (c *cleaner) walkAll() error {
	c.wake = sync.NewCond(&c.mu)
	c.queue, c.pending = []string{""}, 1
	n := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c.mu.Lock()
				for len(c.queue) == 0 && c.pending > 0 && c.err == nil {
					c.wake.Wait()
				}
				if len(c.queue) == 0 || c.err != nil {
					c.mu.Unlock()
					return
				}
				j := c.queue[len(c.queue)-1]
				c.queue = c.queue[:len(c.queue)-1]
				c.mu.Unlock()
				err := c.walk(j)
				c.mu.Lock()
				c.pending--
				if err != nil && c.err == nil {
					c.err = err
				}
				if c.pending == 0 || c.err != nil {
					c.wake.Broadcast()
				}
				c.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return c.err
}

// push queues folder rel for a walker.
func (c *cleaner) push(rel string) {
	c.mu.Lock()
	c.queue = append(c.queue, rel)
	c.pending++
	c.wake.Signal()
	c.mu.Unlock()
}

// walk cleans the entries of folder rel (relative to root, "" for root),
// which is known to be a real folder of the right mode, and queues its
// subfolders. Entries are looked at relative to dirfd: a stat by the
// full path would walk every folder above it again, for each file (most
// of the cleaning's time on a 100,000-file tree).
func (c *cleaner) walk(rel string) error {
	dir := filepath.Join(c.root, rel)
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	dirfd := int(f.Fd())
	var buf []byte // the entry's path, looked up without a string made for each
	for _, d := range ents {
		name := d.Name()
		buf = buf[:0]
		if rel != "" {
			buf = append(append(buf, rel...), '/')
		}
		buf = append(buf, name...)
		if i, ok := c.files[string(buf)]; ok {
			e := &c.idx.entries[i]
			p := e.name
			c.seen[i] = true
			if c.mode == cleanQuick && e.mode != modeGitlink {
				if d.Type() != listedType(e.mode) {
					c.found(&c.rep.Replaced, p)
					if err := forceRemoveAll(filepath.Join(dir, name)); err != nil {
						return err
					}
				}
				continue
			}
			if err := c.tracked(dirfd, dir, name, p, e); err != nil {
				return err
			}
			continue
		}
		p := string(buf)
		if c.dirs[p] {
			full := filepath.Join(dir, name)
			if d.Type() != fs.ModeDir {
				// What the index has below it is restored. The commit
				// stages the folder's path: what the index has below
				// it goes, what is there now comes (git would refuse
				// the names below it, beyond a link).
				if c.sv != nil {
					c.found(&c.rep.Replaced, p)
					c.mu.Lock()
					c.replaced[p] = true
					c.mu.Unlock()
				} else {
					c.found(&c.rep.Replaced, "")
				}
				if err := c.drop(full, p, false); err != nil {
					return err
				}
				continue
			}
			if err := c.fixDir(full, p); err != nil {
				return err
			}
			c.push(p)
			continue
		}
		c.found(&c.rep.Untracked, "")
		if err := c.drop(filepath.Join(dir, name), p, true); err != nil {
			return err
		}
	}
	return nil
}

// tracked keeps the entry name in dir (open as dirfd) only while it is
// exactly what kusaw's checkout wrote.
func (c *cleaner) tracked(dirfd int, dir, name, p string, e *indexEntry) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: filepath.Join(dir, name), Err: err}
	}
	typ := st.Mode & unix.S_IFMT
	want := uint32(unix.S_IFREG)
	switch e.mode {
	case modeLink:
		want = unix.S_IFLNK
	case modeGitlink:
		want = unix.S_IFDIR
	}
	if uint32(typ) != want {
		c.found(&c.rep.Replaced, p)
		return c.drop(filepath.Join(dir, name), p, false)
	}
	if e.mode == modeGitlink {
		// A submodule's folder: a checkout leaves it empty (git tells
		// whether what is in it now changes the commit).
		if err := c.fixDir(filepath.Join(dir, name), p); err != nil {
			return err
		}
		ents, err := os.ReadDir(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if len(ents) > 0 && c.sv != nil {
			c.found(&c.rep.Changed, p)
		}
		for _, d := range ents {
			c.found(&c.rep.Untracked, "")
			if err := c.drop(filepath.Join(dir, name, d.Name()), p+"/"+d.Name(), false); err != nil {
				return err
			}
		}
		return nil
	}
	if !c.unchanged(&st, e) {
		c.found(&c.rep.Changed, p)
		if c.sv != nil {
			return nil // a tracked file's content: the next take checks it out again
		}
		return os.Remove(filepath.Join(dir, name))
	}
	return nil
}

// listedType is the type a folder listing gives a tracked entry.
func listedType(mode uint32) fs.FileMode {
	switch mode {
	case modeLink:
		return fs.ModeSymlink
	case modeGitlink:
		return fs.ModeDir
	}
	return 0
}

// unchanged: st is the very inode kusaw's checkout recorded in e, and it
// has not changed since, nor was it stamped in the clock tick the index
// was written in.
func (c *cleaner) unchanged(st *unix.Stat_t, e *indexEntry) bool {
	ctime, mtime := statTimes(st)
	if uint32(ctime.Unix()) != e.ctimeS || uint32(ctime.Nanosecond()) != e.ctimeN ||
		uint32(mtime.Unix()) != e.mtimeS || uint32(mtime.Nanosecond()) != e.mtimeN {
		return false
	}
	if !ctime.Before(c.idx.written) || !mtime.Before(c.idx.written) {
		return false
	}
	if uint32(st.Ino) != e.ino || uint32(st.Dev) != e.dev || st.Uid != e.uid || st.Gid != e.gid || uint32(st.Size) != e.size {
		return false
	}
	if e.mode == modeLink {
		return true
	}
	perm := c.fileMode
	if e.mode == modeExec {
		perm = 0o777 &^ processUmask()
	}
	return st.Nlink == 1 && uint32(st.Mode)&0o7777 == perm
}

// fixDir gives folder p (rel in the tree) the mode a checkout gives it
// and drops its extended attributes; cleanSurvey notes it for Release.
func (c *cleaner) fixDir(p, rel string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a folder", p)
	}
	if c.sv != nil {
		if uint32(st.Mode)&0o7777 != c.dirMode || hasXattrs(p) {
			c.mu.Lock()
			c.sv.folders = append(c.sv.folders, rel)
			c.mu.Unlock()
		}
		return ownerCanRead(p, uint32(st.Mode))
	}
	return c.resetDir(p)
}

// ownerCanRead gives folder p (of mode) back to its owner's reading and
// search, when the step took them: kusaw's commit must see what is in
// it (as root it does whatever the mode; as the step's own user git
// would skip it, exit 0). Release resets the mode in full.
func ownerCanRead(p string, mode uint32) error {
	if mode&0o500 == 0o500 {
		return nil
	}
	return os.Chmod(p, fs.FileMode(mode&0o777|0o700))
}

// readableFolders makes p, if a folder, and every folder below it (never
// through a link) readable and searchable by its owner: p is a path the
// commit names to git, which reads it all anyway.
func readableFolders(p string) error { return readableTree(p, false) }

// readableTree is readableFolders, and with files also gives every
// regular file below p (or p) its owner's read (a stat of each file:
// only once git add failed).
func readableTree(p string, files bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil // a path deleted: git tells
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if files && st.Mode&0o400 == 0 {
			return os.Chmod(p, fs.FileMode(st.Mode&0o777|0o400))
		}
		return nil
	case unix.S_IFDIR:
	default:
		return nil
	}
	if err := ownerCanRead(p, uint32(st.Mode)); err != nil {
		return err
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, d := range ents {
		if d.IsDir() || files && d.Type().IsRegular() {
			if err := readableTree(filepath.Join(p, d.Name()), files); err != nil {
				return err
			}
		}
	}
	return nil
}

// resetDir is fixDir's repair.
func (c *cleaner) resetDir(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a folder", p)
	}
	fixed := false
	if uint32(st.Mode)&0o7777 != c.dirMode {
		if err := os.Chmod(p, fs.FileMode(c.dirMode)); err != nil {
			return err
		}
		fixed = true
	}
	dropped, err := dropXattrs(p)
	if err != nil {
		return err
	}
	if fixed || dropped {
		c.found(&c.rep.Folders, "")
	}
	return nil
}

// hasXattrs: p has extended attributes dropXattrs would remove.
func hasXattrs(p string) bool {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		return false
	}
	buf := make([]byte, n)
	if n, err = unix.Llistxattr(p, buf); err != nil {
		return false
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name != "" && !strings.HasPrefix(name, "security.") {
			return true
		}
	}
	return false
}

// applySurvey removes and repairs in root what sv found there at the
// commit, without a walk: the folders first (a folder the step made
// unwritable keeps what is in it), each only while every folder above
// it is still a real one (never a link planted since).
func applySurvey(root string, sv *survey) (CleanReport, error) {
	c := &cleaner{root: root, dirMode: 0o777 &^ processUmask()}
	for _, rel := range sv.folders {
		if err := realFolders(root, rel, true); err != nil {
			return c.rep, err
		}
		if err := c.resetDir(filepath.Join(root, rel)); err != nil {
			return c.rep, err
		}
	}
	for _, rel := range sv.remove {
		if err := realFolders(root, rel, false); errors.Is(err, fs.ErrNotExist) {
			continue // gone with what was above it
		} else if err != nil {
			return c.rep, err
		}
		c.rep.Untracked++
		if err := forceRemoveAll(filepath.Join(root, rel)); err != nil {
			return c.rep, err
		}
	}
	return c.rep, nil
}

// realFolders: each folder on the way from root to rel (rel itself too
// when self) is a folder, not a link.
func realFolders(root, rel string, self bool) error {
	p := root
	parts := strings.Split(rel, "/")
	if !self {
		parts = parts[:len(parts)-1]
	}
	for _, part := range parts {
		if part == "" {
			continue
		}
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is no longer a folder", p)
		}
	}
	return nil
}

var umask struct {
	once sync.Once
	v    uint32
}

// processUmask is kusaw's umask, which git's checkout applies to the
// files and folders it makes. Linux reports it in /proc/self/status;
// elsewhere 022 is assumed (a tree checked out under another umask is
// then only checked out again, never kept wrongly: a mode that differs
// from the expected one never counts as unchanged).
func processUmask() uint32 {
	umask.once.Do(func() {
		umask.v = 0o022
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Umask:"); ok {
				var m uint32
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%o", &m); err == nil {
					umask.v = m & 0o777
				}
			}
		}
	})
	return umask.v
}

// clearTree empties root except its .git, for a fresh checkout into it.
func clearTree(root string) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range ents {
		if d.Name() != ".git" {
			errs = append(errs, forceRemoveAll(filepath.Join(root, d.Name())))
		}
	}
	return errors.Join(errs...)
}

func statTimes(st *unix.Stat_t) (ctime, mtime time.Time) {
	return time.Unix(st.Ctim.Unix()), time.Unix(st.Mtim.Unix())
}

// dropXattrs removes every extended attribute of p (never following a
// link); a filesystem without them has none to remove.
func dropXattrs(p string) (bool, error) {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		return false, nil
	}
	buf := make([]byte, n)
	if n, err = unix.Llistxattr(p, buf); err != nil {
		return false, nil
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		// security.* are the system's labels (SELinux, Smack): not the
		// step's to set, and not kusaw's to drop.
		if name == "" || strings.HasPrefix(name, "security.") {
			continue
		}
		if err := unix.Lremovexattr(p, name); err != nil {
			return true, fmt.Errorf("remove extended attribute %s of %s: %v", name, p, err)
		}
	}
	return true, nil
}
