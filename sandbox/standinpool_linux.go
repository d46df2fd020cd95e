//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Stand-in folders (tmpfs mount points at protected folders that do not
// exist, such as .git or .claude in a folder that has none) used to be
// made by bwrap and removed by Cleanup. On a file system mounted with
// discard, each rmdir waits for its block to be discarded (docs/
// benchmarks.md, "Lean start, fifth pass"). So empty folders are kept in
// a pool in kusaw's cache folder: Command takes a stand-in from it with
// rename(2) and Cleanup gives it back the same way; a rename frees no
// block. What a step or git sees is unchanged: an empty folder at the
// same path, present from before the start to Cleanup, as before.
//
// The pool must be out of every step's reach: a step that could write
// into a spare folder, or hold one open, could put files into another
// attempt's stand-in. So the pool is a folder of this user that nobody
// else may write (privateDir), every plan that would show it hides it
// (hideStandInPool), and a spare folder is taken only when it is empty and
// not writable by others. Taking is atomic: a rename that fails because
// the spare is gone means another attempt took it. When anything is off
// (another file system: EXDEV; no pool; the pool full) it is mkdir and
// rmdir as before.

// privateDir reports whether d (not a link) is a folder of this user that
// others may not read or write, in a folder of this user (or root's) that
// others may not write.
func privateDir(d string) bool {
	mine := func(p string, mask uint32, rootOK bool) bool {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&mask != 0 {
			return false
		}
		return int(st.Uid) == os.Geteuid() || (rootOK && st.Uid == 0)
	}
	return mine(d, 0o077, false) && mine(filepath.Dir(d), 0o022, true)
}

type standInPool struct {
	dir   string
	spare []string     // names listed when opened (Command's)
	room  atomic.Int64 // folders that may still come back (Cleanup's)
	seq   atomic.Int64
}

// openStandInPool opens the pool (making it on first use); nil when there
// is none to use.
func openStandInPool(standIns int) *standInPool {
	d := standInPoolDir()
	if standIns == 0 || d == "" || poolUnsafe.Load() {
		return nil
	}
	if !privateDir(d) {
		_ = os.MkdirAll(filepath.Dir(d), 0o700)
		_ = unix.Mkdir(d, 0o700)
		if !privateDir(d) {
			return nil
		}
	}
	// A link on the way could lie in a folder a step may write, where the
	// plan's hiding (of the resolved path) does not reach: the step could
	// put a folder of its own in the link's place. Folders alone can be
	// fixed in place (pinPoolFolders).
	if r, err := filepath.EvalSymlinks(d); err != nil || r != d {
		return nil
	}
	f, err := os.Open(d)
	if err != nil {
		return nil
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil
	}
	p := &standInPool{dir: d, spare: names}
	p.room.Store(int64(standInPoolMax - len(names)))
	return p
}

// spareEmpty reports whether path is an empty folder of this user that
// others may not write (not a link).
func spareEmpty(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return false
	}
	buf := make([]byte, 1024)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if n <= 0 {
			return true
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				return false
			}
			name := b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if s := string(name); s != "." && s != ".." {
				return false
			}
		}
	}
}

// takeStandIns makes the plan's missing stand-in folders from the pool's
// spare folders; any it cannot, bwrap makes as before.
func (p *Plan) takeStandIns() {
	if len(p.standInDirs) == 0 {
		return
	}
	pool := openStandInPool(len(p.standInDirs))
	if pool == nil {
		return
	}
	spare := pool.spare
next:
	for _, d := range p.standInDirs {
		for _, o := range p.standInDirs {
			if o != d && within(o, d) {
				continue next // made inside the other's tmpfs, not on disk
			}
		}
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			continue
		}
		for len(spare) > 0 {
			src := filepath.Join(pool.dir, spare[0])
			spare = spare[1:]
			if !spareEmpty(src) {
				continue // left in the pool; never a stand-in
			}
			err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, d, unix.RENAME_NOREPLACE)
			switch {
			case err == nil:
				continue next
			case err == unix.ENOENT:
				if _, serr := os.Lstat(src); serr == nil {
					spare = append([]string{filepath.Base(src)}, spare...)
					continue next // d's folder is gone: bwrap says so
				}
				// Another attempt took it: try the next.
			case err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS:
				return // another file system, or no RENAME_NOREPLACE
			default:
				spare = append([]string{filepath.Base(src)}, spare...)
				continue next // d exists now, or cannot be made: as before
			}
		}
		return
	}
}

// giveBack moves the empty stand-in folder s into the pool; false when it
// did not (then Cleanup removes it, or reports it, as before).
func (pool *standInPool) giveBack(s string) bool {
	if pool == nil || pool.room.Add(-1) < 0 || !spareEmpty(s) {
		return false
	}
	name := strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(pool.seq.Add(1), 10)
	return unix.Renameat2(unix.AT_FDCWD, s, unix.AT_FDCWD, filepath.Join(pool.dir, name), unix.RENAME_NOREPLACE) == nil
}
