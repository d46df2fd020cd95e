//go:build linux

package sandbox

import (
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
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
}

// startWalk reads root's entries; nil when root cannot be opened.
func startWalk(root string) *sharedWalk {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	w := &sharedWalk{fd: fd, root: root, entries: readEntries(fd, make([]byte, 16<<10))}
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
		walkEntry(w.fd, w.root, w.entries[i], buf, &w.lists[i])
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
	})
	return w.list
}

type dirEntry struct {
	name string
	typ  byte
}

// readEntries returns the entries of the folder dfd that the rule may
// concern (folders, regular files, and those the file system does not
// type), in lexical order.
func readEntries(dfd int, buf []byte) []dirEntry {
	var entries []dirEntry
	for {
		n, err := unix.Getdents(dfd, buf)
		if err == unix.EINTR {
			continue
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
			switch s := string(name); {
			case s == "." || s == "..":
			case typ == unix.DT_DIR || typ == unix.DT_REG || typ == unix.DT_UNKNOWN:
				// Links, devices, sockets and pipes are left alone
				// without a stat: the rule does not look at them.
				entries = append(entries, dirEntry{s, typ})
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
	return entries
}

func walkUnreadable(dfd int, dir string, buf []byte, out *[]unreadable) {
	for _, e := range readEntries(dfd, buf) {
		walkEntry(dfd, dir, e, buf, out)
	}
}

// walkEntry adds e, an entry of the folder dfd (at dir), to out when others
// may not read it, else what they may not read below it.
func walkEntry(dfd int, dir string, e dirEntry, buf []byte, out *[]unreadable) {
	var st unix.Stat_t
	if unix.Fstatat(dfd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFREG:
	default:
		return
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
		return
	}
	walkUnreadable(sub, dir+"/"+e.name, buf, out)
	unix.Close(sub)
}

// walkOnGoroutine walks root on a goroutine of its own and sends the list
// to ch. The function it returns lets a goroutine that needs the list
// take part in the walk and have the list at once (ok), without waiting
// for the walk's goroutine to be scheduled again; ok is false before that
// goroutine read root (then the list comes on ch).
func walkOnGoroutine(root string, ch chan<- []unreadable) (help func() ([]unreadable, bool)) {
	var shared atomic.Pointer[sharedWalk]
	go func() {
		w := startWalk(root)
		if w == nil {
			ch <- nil
			return
		}
		shared.Store(w)
		w.help()
		ch <- w.result()
	}()
	return func() ([]unreadable, bool) {
		w := shared.Load()
		if w == nil {
			return nil, false
		}
		w.help()
		return w.result(), true
	}
}
