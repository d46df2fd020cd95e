//go:build linux

package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The walk of /etc is remembered between runs, with the state of every
// folder and file it looked at: a later run stats each of them again
// (about 460 here, a quarter of the walk's system calls and none of its
// folder reads) and uses the remembered list only when every one is as it
// was. Nothing the list depends on can change without moving a ctime the
// run compares: a file's mode or owner changes its own ctime, an entry
// added, removed or renamed changes its folder's, a mount over an entry
// changes its device and inode, and ctime cannot be set from user space.
// A walk is not remembered when it could not read everything, or when an
// entry changed within walkRacyFor of its start (a change in the same
// clock tick as the one recorded would leave the ctime as it was), or
// on a file system whose ctimes it does not know to keep.

// walkRacyFor: an entry changed this shortly before a walk started makes
// the walk not remembered.
const walkRacyFor = 2 * time.Second

// walkCacheMax bounds what is read back.
const walkCacheMax = 8 << 20

const walkCacheMagic = "kusaw etc walk 1\n"

// walkRecord is the state of one entry a walk looked at.
type walkRecord struct {
	path      string
	dev, ino  uint64
	mode      uint32 // type and permission bits
	ctimeSec  int64
	ctimeNsec int64
}

func recordOf(path string, st *unix.Stat_t) walkRecord {
	return walkRecord{path: path, dev: st.Dev, ino: st.Ino, mode: st.Mode, ctimeSec: st.Ctim.Sec, ctimeNsec: st.Ctim.Nsec}
}

func (r walkRecord) same(st *unix.Stat_t) bool {
	return r.dev == st.Dev && r.ino == st.Ino && r.mode == st.Mode && r.ctimeSec == st.Ctim.Sec && r.ctimeNsec == st.Ctim.Nsec
}

// walkCachePath is where root's walk is remembered; "" for nowhere. Only
// the system folder's walk is.
func walkCachePath(root string) string {
	if root != systemSecretsIn {
		return ""
	}
	switch WalkCacheFile {
	case "off":
		return ""
	case "":
	default:
		return WalkCacheFile
	}
	d, err := os.UserCacheDir()
	if err != nil || !filepath.IsAbs(d) {
		return ""
	}
	return filepath.Join(d, "kusaw", "etc-walk")
}

// systemUnreadable is unreadableBelow(root), from the remembered walk when
// nothing it looked at changed, else walked and remembered.
func systemUnreadable(root string) []unreadable {
	file := walkCachePath(root)
	if l, ok := cachedWalk(root, file); ok {
		return l
	}
	started := time.Now()
	w := startRecordedWalk(root)
	if w == nil {
		return nil
	}
	w.help()
	l := w.result()
	rememberWalk(w, file, started)
	return l
}

// cachedWalk returns root's list from the walk remembered in file when
// every entry that walk looked at is as it was then.
func cachedWalk(root, file string) ([]unreadable, bool) {
	if file == "" {
		return nil, false
	}
	b, ok := readOwnFile(file)
	if !ok {
		return nil, false
	}
	recs, ok := decodeWalk(b, root)
	if !ok || len(recs) == 0 {
		return nil, false
	}
	var list []unreadable
	var st unix.Stat_t
	for i, r := range recs {
		flags := unix.AT_SYMLINK_NOFOLLOW
		if i == 0 {
			flags = 0 // root is opened following a link, as the walk does
		}
		if unix.Fstatat(unix.AT_FDCWD, r.path, &st, flags) != nil || !r.same(&st) {
			return nil, false
		}
		if i == 0 {
			continue
		}
		mode, ok := walkMode(r.mode)
		if !ok {
			return nil, false // the walk records only folders and regular files
		}
		if unreadableFor(mode) {
			list = append(list, unreadable{r.path, mode.IsDir()})
		}
	}
	return list, true
}

// rememberWalk writes w's records to file when w read everything, no
// entry changed within walkRacyFor of started, and every file system it
// crossed keeps ctimes (cachedWalk's rule). Best effort: a write that
// fails leaves the next run to walk.
func rememberWalk(w *sharedWalk, file string, started time.Time) {
	if file == "" || w.recs == nil || w.partial.Load() {
		return
	}
	recs := append([]walkRecord{w.rootRec}, nil...)
	for _, r := range w.recs {
		recs = append(recs, r...)
	}
	limit := started.Add(-walkRacyFor)
	devs := map[uint64]bool{}
	for _, r := range recs {
		if !time.Unix(r.ctimeSec, r.ctimeNsec).Before(limit) {
			return
		}
		if !devs[r.dev] {
			if !keepsCtimes(r.path) {
				return
			}
			devs[r.dev] = true
		}
	}
	b, ok := encodeWalk(w.root, recs)
	if !ok {
		return
	}
	writeOwnFile(file, b)
}

// keepsCtimes: the file system holding path is one whose ctimes move on
// every change of an inode (the local ones kusaw is used on). Others,
// network file systems among them, are walked every time.
func keepsCtimes(path string) bool {
	var sfs unix.Statfs_t
	if unix.Statfs(path, &sfs) != nil {
		return false
	}
	switch uint32(sfs.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.OVERLAYFS_SUPER_MAGIC, unix.F2FS_SUPER_MAGIC:
		return true
	}
	return false
}

// encodeWalk is the file's content: the magic, root, then each record
// (root's first) as ctime seconds and nanoseconds, device, inode, mode
// and the path's length, little-endian, then the path.
func encodeWalk(root string, recs []walkRecord) ([]byte, bool) {
	var b bytes.Buffer
	b.WriteString(walkCacheMagic)
	b.WriteString(root)
	b.WriteByte('\n')
	var n [8 + 8 + 8 + 8 + 4 + 4]byte
	for _, r := range recs {
		if len(r.path) > 1<<16-1 {
			return nil, false
		}
		binary.LittleEndian.PutUint64(n[0:], uint64(r.ctimeSec))
		binary.LittleEndian.PutUint64(n[8:], uint64(r.ctimeNsec))
		binary.LittleEndian.PutUint64(n[16:], r.dev)
		binary.LittleEndian.PutUint64(n[24:], r.ino)
		binary.LittleEndian.PutUint32(n[32:], r.mode)
		binary.LittleEndian.PutUint32(n[36:], uint32(len(r.path)))
		b.Write(n[:])
		b.WriteString(r.path)
	}
	return b.Bytes(), true
}

// decodeWalk reads encodeWalk's content for root; false for anything else.
func decodeWalk(b []byte, root string) ([]walkRecord, bool) {
	head := walkCacheMagic + root + "\n"
	if !bytes.HasPrefix(b, []byte(head)) {
		return nil, false
	}
	b = b[len(head):]
	var recs []walkRecord
	for len(b) > 0 {
		if len(b) < 40 {
			return nil, false
		}
		l := int(binary.LittleEndian.Uint32(b[36:]))
		if l == 0 || len(b) < 40+l {
			return nil, false
		}
		r := walkRecord{
			ctimeSec:  int64(binary.LittleEndian.Uint64(b[0:])),
			ctimeNsec: int64(binary.LittleEndian.Uint64(b[8:])),
			dev:       binary.LittleEndian.Uint64(b[16:]),
			ino:       binary.LittleEndian.Uint64(b[24:]),
			mode:      binary.LittleEndian.Uint32(b[32:]),
			path:      string(b[40 : 40+l]),
		}
		// Root first, then only paths below it.
		if (len(recs) == 0 && r.path != root) || (len(recs) > 0 && !within(root, r.path)) || bytes.IndexByte(b[40:40+l], 0) >= 0 {
			return nil, false
		}
		recs = append(recs, r)
		b = b[40+l:]
	}
	return recs, true
}

// readOwnFile reads file when it is a regular file of this user's that
// no one else may write, in a folder of this user's that no one else may
// write: what it says decides what a step sees.
func readOwnFile(file string) ([]byte, bool) {
	uid := uint32(os.Geteuid())
	var st unix.Stat_t
	if unix.Lstat(filepath.Dir(file), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uid || st.Mode&0o022 != 0 {
		return nil, false
	}
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uid || st.Mode&0o022 != 0 || st.Size > walkCacheMax {
		return nil, false
	}
	b := make([]byte, st.Size)
	n, err := unix.Read(fd, b)
	if err != nil || n != len(b) {
		return nil, false
	}
	return b, true
}

// writeOwnFile replaces file with b, readable by this user alone, in a
// folder made for this user alone.
func writeOwnFile(file string, b []byte) {
	dir := filepath.Dir(file)
	if os.MkdirAll(dir, 0o700) != nil {
		return
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	tmp := file + "." + hex.EncodeToString(r[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(tmp, file) != nil {
		os.Remove(tmp)
	}
}
