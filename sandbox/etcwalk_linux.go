//go:build linux

package sandbox

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/internal/mountinfo"
)

// unreadableBelow lists, in lexical order, the files and folders below
// root that other users may not read (unreadableFor), not entering the
// folders it lists and not following links. Each folder is read through
// its own descriptor and each entry stat'ed relative to it, and links are
// known from the directory entry itself: /etc has about 1,400 entries, and
// resolving each full path again (what filepath.WalkDir's lstat does) made
// this walk most of a plan's time
// (docs/benchmarks.md, "Lean start, fifth pass (issue 25)").
// A folder that cannot be opened is left as it is, as the walk by path
// does.
func unreadableBelow(root string) []unreadable {
	w := startWalk(root)
	if w == nil {
		return nil
	}
	w.help()
	return w.result()
}

// sharedWalk is one walk of root that more than one goroutine can do
// together: root's entries are taken one at a time by whichever goroutine
// comes first (help), each walked below by it, and the lists are put
// together in the entries' order, so the result is the walk's, entry for
// entry, however it was shared. The walk started ahead (WalkSystemAhead)
// does its part on a goroutine of its own, and the plan that needs it
// takes the entries left when it comes, rather than waiting for them.
type sharedWalk struct {
	fd      int
	root    string
	entries []dirEntry
	next    atomic.Int64
	lists   [][]unreadable // by entry
	done    sync.WaitGroup // one per entry
	once    sync.Once      // result's
	list    []unreadable

	// What a walk to be remembered (startRecordedWalk) looked at, by
	// entry, root's own first; partial when an entry or folder could not
	// be read, so the walk may not be what /etc holds.
	rootRec walkRecord
	recs    [][]walkRecord
	partial atomic.Bool
}

// startWalk reads root's entries; nil when root cannot be opened.
func startWalk(root string) *sharedWalk { return startWalkOf(root, false) }

// startRecordedWalk is startWalk for a walk to be remembered
// (rememberWalk): it records root and every entry it stat's.
func startRecordedWalk(root string) *sharedWalk { return startWalkOf(root, true) }

func startWalkOf(root string, record bool) *sharedWalk {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	w := &sharedWalk{fd: fd, root: root}
	if record {
		// Root's state before its entries are read: a change in between
		// moves its ctime past the one recorded.
		r, err := statRecord(fd, "", root, unix.AT_EMPTY_PATH)
		if err != nil {
			w.partial.Store(true)
		}
		w.rootRec = r
	}
	entries, complete := readEntries(fd, make([]byte, 16<<10))
	w.entries = entries
	if !complete {
		w.partial.Store(true)
	}
	if record {
		w.recs = make([][]walkRecord, len(w.entries))
	}
	w.lists = make([][]unreadable, len(w.entries))
	w.done.Add(len(w.entries))
	return w
}

// help walks entries until none is left to take.
func (w *sharedWalk) help() {
	var buf []byte
	for {
		i := int(w.next.Add(1) - 1)
		if i >= len(w.entries) {
			return
		}
		if buf == nil {
			buf = make([]byte, 16<<10)
		}
		var rec *walkRecorder
		if w.recs != nil {
			rec = &walkRecorder{out: &w.recs[i], partial: &w.partial}
		}
		walkEntry(w.fd, w.root, w.entries[i], buf, &w.lists[i], rec)
		w.done.Done()
	}
}

// result waits for every entry taken and returns the walk's list, the
// same to every caller; the first closes the descriptor of root.
func (w *sharedWalk) result() []unreadable {
	w.done.Wait()
	w.once.Do(func() {
		unix.Close(w.fd)
		for _, l := range w.lists {
			w.list = append(w.list, l...)
		}
		w.list = withMountPoints(w.root, w.list)
	})
	return w.list
}

// withMountPoints adds to list what is mounted below root where the walk
// does not look: a file or folder can be mounted on a link, a device, a
// socket or a pipe (open_tree and move_mount), and bwrap's bind of root
// carries it. Each mount point below root in /proc/self/mountinfo is
// stat'ed through its mount; one that others may not read is added,
// unless list already hides it or a folder above it.
func withMountPoints(root string, list []unreadable) []unreadable {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return list
	}
	hidden := func(l []unreadable, p string) bool {
		return slices.ContainsFunc(l, func(u unreadable) bool { return u.path == p || (u.dir && within(u.path, p)) })
	}
	var extra []unreadable
	for line := range strings.SplitSeq(string(b), "\n") {
		// id parent major:minor root mount-point ...; the mount point's
		// spaces, tabs, newlines and backslashes written as \ooo.
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := mountinfo.Unescape(f[4])
		if mp == root || !within(root, mp) || hidden(list, mp) || hidden(extra, mp) {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(mp, &st) != nil {
			continue
		}
		if mode, ok := walkMode(st.Mode); ok && unreadableFor(mode) {
			extra = append(extra, unreadable{mp, mode.IsDir()})
		}
	}
	slices.SortFunc(extra, func(a, b unreadable) int { return strings.Compare(a.path, b.path) })
	return append(list, extra...)
}

type dirEntry struct {
	name string
	typ  byte
}

// readEntries returns the entries of the folder dfd that the rule may
// concern (folders, regular files, and those the file system does not
// type), in lexical order; complete is false when reading the folder
// failed part way.
func readEntries(dfd int, buf []byte) (entries []dirEntry, complete bool) {
	// Links, devices, sockets and pipes are left alone without a stat:
	// the rule does not look at them.
	return scanEntries(dfd, buf, func(typ byte) bool {
		return typ == unix.DT_DIR || typ == unix.DT_REG || typ == unix.DT_UNKNOWN
	})
}

// scanEntries returns the entries of the folder dfd whose type keep takes,
// in lexical order, with no stat and no allocation for the others;
// complete is false when reading the folder failed part way.
func scanEntries(dfd int, buf []byte, keep func(typ byte) bool) (entries []dirEntry, complete bool) {
	complete = true
	for {
		n, err := unix.Getdents(dfd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			complete = false
		}
		if err != nil || n <= 0 {
			break
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			typ, name := b[18], b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if keep(typ) && string(name) != "." && string(name) != ".." {
				entries = append(entries, dirEntry{string(name), typ})
			}
		}
	}
	slices.SortFunc(entries, func(a, b dirEntry) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return entries, complete
}

func walkUnreadable(dfd int, dir string, buf []byte, out *[]unreadable, rec *walkRecorder) {
	entries, complete := readEntries(dfd, buf)
	if !complete && rec != nil {
		rec.partial.Store(true)
	}
	for _, e := range entries {
		walkEntry(dfd, dir, e, buf, out, rec)
	}
}

// walkRecorder keeps what a walk to be remembered looked at.
type walkRecorder struct {
	out     *[]walkRecord
	partial *atomic.Bool
}

// walkEntry adds e, an entry of the folder dfd (at dir), to out when others
// may not read it, else what they may not read below it; rec, when not
// nil, gets every entry it stat'ed, in the walk's order.
func walkEntry(dfd int, dir string, e dirEntry, buf []byte, out *[]unreadable, rec *walkRecorder) {
	var st unix.Stat_t
	var r walkRecord
	recorded := false
	if rec != nil && !rec.partial.Load() {
		// One statx gives the record (its mount's id too) and the mode;
		// a kernel without the id leaves the walk not remembered and
		// the rest of it to the plain stat.
		var err error
		if r, err = statRecord(dfd, e.name, dir+"/"+e.name, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			st.Mode, recorded = r.mode, true
		} else {
			rec.partial.Store(true)
		}
	}
	if !recorded && unix.Fstatat(dfd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		if rec != nil {
			rec.partial.Store(true)
		}
		return
	}
	mode, ok := walkMode(st.Mode)
	if !ok {
		return
	}
	if recorded {
		*rec.out = append(*rec.out, r)
	}
	if unreadableFor(mode) {
		*out = append(*out, unreadable{dir + "/" + e.name, mode.IsDir()})
		return
	}
	if !mode.IsDir() {
		return // most of /etc: no path made for it
	}
	// O_NOFOLLOW: a folder swapped for a link since the stat is not
	// followed (and so not walked, as a link is not).
	sub, err := unix.Openat(dfd, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if rec != nil {
			rec.partial.Store(true)
		}
		return
	}
	walkUnreadable(sub, dir+"/"+e.name, buf, out, rec)
	unix.Close(sub)
}

// walkMode is a folder's or regular file's mode as the rule reads it;
// false for other types, which the walk leaves alone.
func walkMode(m uint32) (fs.FileMode, bool) {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return mode | fs.ModeDir, true
	case unix.S_IFREG:
		return mode, true
	}
	return 0, false
}

// walkOnGoroutine walks root on a goroutine of its own and sends the list
// to ch. The function it returns lets a goroutine that needs the list
// take part in the walk and have the list at once (ok), without waiting
// for the walk's goroutine to be scheduled again; ok is false before that
// goroutine read root (then the list comes on ch).
func walkOnGoroutine(root string, ch chan<- []unreadable) (help func() ([]unreadable, bool)) {
	var shared atomic.Pointer[sharedWalk]
	var check atomic.Pointer[walkCheck]
	go func() {
		file := walkCachePath(root)
		if c := newWalkCheck(root, file); c != nil {
			check.Store(c)
			c.help()
			if l, ok := c.result(); ok {
				ch <- l
				return
			}
		}
		started := time.Now()
		w := startRecordedWalk(root)
		if w == nil {
			ch <- nil
			return
		}
		shared.Store(w)
		w.help()
		l := w.result()
		rememberWalk(w, file, started)
		ch <- l
	}()
	return func() ([]unreadable, bool) {
		if c := check.Load(); c != nil {
			c.help()
			if l, ok := c.result(); ok {
				return l, true
			}
		}
		w := shared.Load()
		if w == nil {
			return nil, false
		}
		w.help()
		return w.result(), true
	}
}
