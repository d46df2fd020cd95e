//go:build linux

package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// changes its device and inode, and ctime cannot be set from user space
// on a mounted file system. A file system written while unmounted (the
// next version of an image, built with pinned timestamps, on the same
// loop or dm device) can keep every device, inode and ctime: each entry's
// mount is compared too, by the id the kernel never gives twice in a boot
// (STATX_MNT_ID_UNIQUE, Linux 6.8; older kernels walk every time), and a
// walk is used only in the boot it was made in (boot_id), which an image
// of the root written offline needs a reboot to reach.
// A walk is not remembered when it could not read everything, or when an
// entry changed within walkRacyFor of its start (a change in the same
// clock tick as the one recorded would leave the ctime as it was), or
// on a file system whose ctimes it does not know to keep.

// walkRacyFor: an entry changed this shortly before a walk started makes
// the walk not remembered.
const walkRacyFor = 2 * time.Second

// walkCacheMax bounds what is read back.
const walkCacheMax = 8 << 20

// walkRecordLen is a record's fixed part in the file.
const walkRecordLen = 8 + 8 + 8 + 8 + 8 + 4 + 4

const walkCacheMagic = "kusaw etc walk 2\n"

// walkRecord is the state of one entry a walk looked at.
type walkRecord struct {
	path      string
	dev, ino  uint64
	mode      uint32 // type and permission bits
	ctimeSec  int64
	ctimeNsec int64
	mnt       uint64 // the mount's unique id (STATX_MNT_ID_UNIQUE)
}

// errNoMountID: the kernel gives no unique mount id (before Linux 6.8),
// so a walk cannot be remembered.
var errNoMountID = errors.New("no unique mount id")

// statRecord is the record of name relative to dfd (at path) by one statx.
func statRecord(dfd int, name, path string, flags int) (walkRecord, error) {
	const want = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_INO | unix.STATX_CTIME
	var sx unix.Statx_t
	if err := unix.Statx(dfd, name, flags, want|unix.STATX_MNT_ID_UNIQUE, &sx); err != nil {
		return walkRecord{}, err
	}
	if sx.Mask&want != want || sx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return walkRecord{}, errNoMountID
	}
	return walkRecord{path: path, dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), ino: sx.Ino, mode: uint32(sx.Mode),
		ctimeSec: sx.Ctime.Sec, ctimeNsec: int64(sx.Ctime.Nsec), mnt: sx.Mnt_id}, nil
}

// walkCachePath is where root's walk is remembered; "" for nowhere. Only
// the system folder's walk is. Not in the cache folder the environment
// names (XDG_CACHE_HOME, HOME): a plan hides the kusaw folder its own
// process names, and a step of a kusaw with another XDG_CACHE_HOME (a
// service, the factory's unsandboxed steps) could write the file the
// next kusaw reads. The home the user database gives the euid is the
// same for every process of the user, and every plan hides the folder
// (hideStandInPool, walkCacheFolder).
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
	home := passwdHome(os.Geteuid())
	if home == "" || home == "/" || !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Join(home, ".cache", "kusaw", "etc-walk")
}

// walkCacheFolder is the folder of the remembered walk of /etc; "" for none.
func walkCacheFolder() string {
	if f := walkCachePath(systemSecretsIn); f != "" {
		return filepath.Dir(f)
	}
	return ""
}

// passwdFile is the user database passwdHome reads (a variable for tests).
var passwdFile = "/etc/passwd"

// passwdHome is uid's home in passwdFile, as getpwuid gives it for a
// local user (the first line for uid); "" when it has none (a user of a
// network directory walks every time).
func passwdHome(uid int) string {
	// Read once per process and file: every plan asks twice (the walk's
	// file, the folder hidden).
	passwdHomes.Lock()
	defer passwdHomes.Unlock()
	key := passwdFile + "\x00" + strconv.Itoa(uid)
	if h, ok := passwdHomes.m[key]; ok {
		return h
	}
	h := readPasswdHome(uid)
	if passwdHomes.m == nil {
		passwdHomes.m = map[string]string{}
	}
	passwdHomes.m[key] = h
	return h
}

var passwdHomes struct {
	sync.Mutex
	m map[string]string
}

func readPasswdHome(uid int) string {
	b, err := os.ReadFile(passwdFile)
	if err != nil || len(b) > 4<<20 {
		return ""
	}
	id := strconv.Itoa(uid)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 7 && f[2] == id {
			return filepath.Clean(f[5])
		}
	}
	return ""
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
	c := newWalkCheck(root, file)
	if c == nil {
		return nil, false
	}
	c.help()
	return c.result()
}

// walkCheck is the check of one remembered walk, shared as a fresh walk is
// (sharedWalk): its records are stat'ed a chunk at a time by whichever
// goroutine comes first, so the plan that needs the list checks the rest
// alongside the walk started ahead rather than waiting for it.
type walkCheck struct {
	root  string
	recs  []walkRecord
	next  atomic.Int64
	lists [][]unreadable // by chunk
	bad   atomic.Bool
	done  sync.WaitGroup // one per chunk
	once  sync.Once
	list  []unreadable
}

// walkCheckChunk is how many records a goroutine takes at a time.
const walkCheckChunk = 64

// newWalkCheck reads root's remembered walk from file; nil when there is
// none to check.
func newWalkCheck(root, file string) *walkCheck {
	if file == "" {
		return nil
	}
	b, ok := readOwnFile(file)
	if !ok {
		return nil
	}
	recs, ok := decodeWalk(b, root)
	if !ok || len(recs) == 0 {
		return nil
	}
	c := &walkCheck{root: root, recs: recs, lists: make([][]unreadable, (len(recs)+walkCheckChunk-1)/walkCheckChunk)}
	c.done.Add(len(c.lists))
	return c
}

// help checks chunks until none is left.
func (c *walkCheck) help() {
	for {
		i := int(c.next.Add(1) - 1)
		if i >= len(c.lists) {
			return
		}
		if !c.bad.Load() {
			l, ok := c.checkChunk(i)
			c.lists[i] = l
			if !ok {
				c.bad.Store(true)
			}
		}
		c.done.Done()
	}
}

// checkChunk stats chunk i's records again; false when one changed.
func (c *walkCheck) checkChunk(i int) ([]unreadable, bool) {
	var list []unreadable
	end := min((i+1)*walkCheckChunk, len(c.recs))
	for j := i * walkCheckChunk; j < end; j++ {
		r := c.recs[j]
		flags := unix.AT_SYMLINK_NOFOLLOW
		if j == 0 {
			flags = 0 // root is opened following a link, as the walk does
		}
		if now, err := statRecord(unix.AT_FDCWD, r.path, r.path, flags); err != nil || now != r {
			return nil, false
		}
		if j == 0 {
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

// result waits for every chunk: the list, in the records' order, or false
// when a record changed.
func (c *walkCheck) result() ([]unreadable, bool) {
	c.done.Wait()
	if c.bad.Load() {
		return nil, false
	}
	c.once.Do(func() {
		for _, l := range c.lists {
			c.list = append(c.list, l...)
		}
		// A mount moves no ctime: what is mounted where the walk does
		// not look is read afresh, as after a fresh walk.
		c.list = withMountPoints(c.root, c.list)
	})
	return c.list, true
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

// walkHead is the file's first lines: the magic, root and the boot's id.
func walkHead(root string) (string, bool) {
	id := bootID()
	return walkCacheMagic + root + "\n" + id + "\n", id != ""
}

// encodeWalk is the file's content: walkHead, then each record (root's
// first) as ctime seconds and nanoseconds, device, inode, mount id, mode
// and the path's length, little-endian, then the path.
func encodeWalk(root string, recs []walkRecord) ([]byte, bool) {
	head, ok := walkHead(root)
	if !ok {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteString(head)
	var n [walkRecordLen]byte
	for _, r := range recs {
		if len(r.path) > 1<<16-1 {
			return nil, false
		}
		binary.LittleEndian.PutUint64(n[0:], uint64(r.ctimeSec))
		binary.LittleEndian.PutUint64(n[8:], uint64(r.ctimeNsec))
		binary.LittleEndian.PutUint64(n[16:], r.dev)
		binary.LittleEndian.PutUint64(n[24:], r.ino)
		binary.LittleEndian.PutUint64(n[32:], r.mnt)
		binary.LittleEndian.PutUint32(n[40:], r.mode)
		binary.LittleEndian.PutUint32(n[44:], uint32(len(r.path)))
		b.Write(n[:])
		b.WriteString(r.path)
	}
	return b.Bytes(), true
}

// decodeWalk reads encodeWalk's content for root; false for anything else.
func decodeWalk(b []byte, root string) ([]walkRecord, bool) {
	head, ok := walkHead(root)
	if !ok || !bytes.HasPrefix(b, []byte(head)) {
		return nil, false
	}
	b = b[len(head):]
	const n = walkRecordLen
	recs := make([]walkRecord, 0, len(b)/(n+24))
	for len(b) > 0 {
		if len(b) < n {
			return nil, false
		}
		l := int(binary.LittleEndian.Uint32(b[44:]))
		if l == 0 || len(b) < n+l {
			return nil, false
		}
		r := walkRecord{
			ctimeSec:  int64(binary.LittleEndian.Uint64(b[0:])),
			ctimeNsec: int64(binary.LittleEndian.Uint64(b[8:])),
			dev:       binary.LittleEndian.Uint64(b[16:]),
			ino:       binary.LittleEndian.Uint64(b[24:]),
			mnt:       binary.LittleEndian.Uint64(b[32:]),
			mode:      binary.LittleEndian.Uint32(b[40:]),
			path:      string(b[n : n+l]),
		}
		// Root first, then only paths below it.
		if (len(recs) == 0 && r.path != root) || (len(recs) > 0 && !within(root, r.path)) || bytes.IndexByte(b[n:n+l], 0) >= 0 {
			return nil, false
		}
		recs = append(recs, r)
		b = b[n+l:]
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
