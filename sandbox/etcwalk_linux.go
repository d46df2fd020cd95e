//go:build linux

package sandbox

import (
	"io/fs"
	"slices"

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
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	var out []unreadable
	walkUnreadable(fd, root, make([]byte, 16<<10), &out)
	unix.Close(fd)
	return out
}

func walkUnreadable(dfd int, dir string, buf []byte, out *[]unreadable) {
	type entry struct {
		name string
		typ  byte
	}
	var entries []entry
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
				entries = append(entries, entry{s, typ})
			}
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	for _, e := range entries {
		var st unix.Stat_t
		if unix.Fstatat(dfd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		mode := fs.FileMode(st.Mode & 0o777)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			mode |= fs.ModeDir
		case unix.S_IFREG:
		default:
			continue
		}
		p := dir + "/" + e.name
		if unreadableFor(mode) {
			*out = append(*out, unreadable{p, mode.IsDir()})
			continue
		}
		if !mode.IsDir() {
			continue
		}
		// O_NOFOLLOW: a folder swapped for a link since the stat is not
		// followed (and so not walked, as a link is not).
		sub, err := unix.Openat(dfd, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		walkUnreadable(sub, p, buf, out)
		unix.Close(sub)
	}
}
