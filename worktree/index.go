package worktree

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The index kusaw trusts (docs/factory.md, "Worktree reuse"): the one its own
// git wrote right after checking a worktree out, copied at once to a folder
// no sandbox sees. Cleaning a reused tree and committing an attempt start
// from it, never from the index in the worktree's private git folder, which
// a step can write.

// indexEntry is one path of a trusted index, with the stat data git
// recorded when it wrote the file (each field as git stores it: 32 bits).
type indexEntry struct {
	name         string
	ctimeS       uint32
	ctimeN       uint32
	mtimeS       uint32
	mtimeN       uint32
	dev, ino     uint32
	mode         uint32
	uid, gid     uint32
	size         uint32
	oid          []byte
	flags, flag2 uint16
}

const (
	modeRegular = 0o100644
	modeExec    = 0o100755
	modeLink    = 0o120000
	modeGitlink = 0o160000

	flagValid    = 0x8000 // assume-unchanged
	flagExtended = 0x4000
	flagStage    = 0x3000
	flag2Skip    = 0x4000 // skip-worktree
	flag2Intent  = 0x2000 // intent-to-add
)

// trustedIndex is a parsed trusted index and the time it was written:
// an entry stamped at or after it may have changed in the same clock
// tick as its checkout, so it proves nothing (git's "racy" entries).
type trustedIndex struct {
	entries []indexEntry
	written time.Time
	files   map[string]int32 // entry of each path, made by lookup
	dirs    map[string]bool  // folders the entries are in ("" the root)
}

// lookup is the index by path, made once (a walk of the tree asks it of
// every entry).
func (idx *trustedIndex) lookup() (files map[string]int32, dirs map[string]bool) {
	if idx.files == nil {
		idx.files = make(map[string]int32, len(idx.entries))
		idx.dirs = map[string]bool{"": true}
		for i := range idx.entries {
			e := &idx.entries[i]
			idx.files[e.name] = int32(i)
			for d := filepath.Dir(e.name); d != "." && !idx.dirs[d]; d = filepath.Dir(d) {
				idx.dirs[d] = true
			}
		}
	}
	return idx.files, idx.dirs
}

// maxIndexSize bounds what kusaw reads as an index (a million paths
// take about 100 MB).
const maxIndexSize = 1 << 30

// readTrustedIndex parses the index at path, written by kusaw's git for a
// repository whose object names have hashLen hex digits. Only what a plain
// checkout writes is accepted: versions 2 to 4, stage 0, no assume-unchanged,
// skip-worktree or intent-to-add entries (each would make git skip a file).
func readTrustedIndex(path string, hashLen int) (*trustedIndex, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxIndexSize {
		return nil, fmt.Errorf("index %s is not a regular file of a plausible size", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ents, err := parseIndex(b, hashLen/2)
	if err != nil {
		return nil, fmt.Errorf("index %s: %v", path, err)
	}
	return &trustedIndex{entries: ents, written: fi.ModTime()}, nil
}

func parseIndex(b []byte, oidLen int) ([]indexEntry, error) {
	var h hash.Hash
	switch oidLen {
	case sha1.Size:
		h = sha1.New()
	case sha256.Size:
		h = sha256.New()
	default:
		return nil, fmt.Errorf("object names of %d bytes", oidLen)
	}
	if len(b) < 12+oidLen || !bytes.Equal(b[:4], []byte("DIRC")) {
		return nil, errors.New("not an index file")
	}
	body, sum := b[:len(b)-oidLen], b[len(b)-oidLen:]
	h.Write(body)
	if !bytes.Equal(h.Sum(nil), sum) {
		return nil, errors.New("checksum mismatch")
	}
	version := binary.BigEndian.Uint32(b[4:])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("version %d", version)
	}
	n := int(binary.BigEndian.Uint32(b[8:]))
	if n > len(body)/40 {
		return nil, errors.New("entry count beyond the file's size")
	}
	ents := make([]indexEntry, 0, n)
	off := 12
	prev := ""
	fixed := 40 + oidLen + 2
	for range n {
		if off+fixed > len(body) {
			return nil, io.ErrUnexpectedEOF
		}
		start := off
		u := func(i int) uint32 { return binary.BigEndian.Uint32(body[off+4*i:]) }
		e := indexEntry{ctimeS: u(0), ctimeN: u(1), mtimeS: u(2), mtimeN: u(3), dev: u(4), ino: u(5), mode: u(6), uid: u(7), gid: u(8), size: u(9)}
		e.oid = body[off+40 : off+40+oidLen]
		e.flags = binary.BigEndian.Uint16(body[off+40+oidLen:])
		off += fixed
		if e.flags&flagExtended != 0 {
			if version < 3 || off+2 > len(body) {
				return nil, errors.New("extended flags in a version 2 index")
			}
			e.flag2 = binary.BigEndian.Uint16(body[off:])
			off += 2
		}
		if version == 4 {
			strip, k := binary.Uvarint(body[off:])
			if k <= 0 || int(strip) > len(prev) {
				return nil, errors.New("bad path prefix")
			}
			off += k
			end := bytes.IndexByte(body[off:], 0)
			if end < 0 {
				return nil, io.ErrUnexpectedEOF
			}
			e.name = prev[:len(prev)-int(strip)] + string(body[off:off+end])
			off += end + 1
		} else {
			end := bytes.IndexByte(body[off:], 0)
			if end < 0 {
				return nil, io.ErrUnexpectedEOF
			}
			e.name = string(body[off : off+end])
			// Entries are padded with 1 to 8 NULs to a multiple of 8.
			off = start + (off+end-start+8)&^7
		}
		if e.flags&(flagValid|flagStage) != 0 || e.flag2&(flag2Skip|flag2Intent) != 0 {
			return nil, fmt.Errorf("entry %q is not a plain checkout's (flags %#x %#x)", e.name, e.flags, e.flag2)
		}
		if !validIndexPath(e.name) || e.name <= prev && prev != "" {
			return nil, fmt.Errorf("path %q is out of order or not a clean relative path", e.name)
		}
		prev = e.name
		ents = append(ents, e)
	}
	return ents, nil
}

// validIndexPath: a path git itself would check out (no empty, . or ..
// component, no leading or doubled slash, no .git component).
func validIndexPath(p string) bool {
	if p == "" || p[0] == '/' || p[len(p)-1] == '/' {
		return false
	}
	for p != "" {
		s := p
		if i := strings.IndexByte(p, '/'); i >= 0 {
			s, p = p[:i], p[i+1:]
		} else {
			p = ""
		}
		if s == "" || s == "." || s == ".." || strings.EqualFold(s, ".git") {
			return false
		}
	}
	return true
}

// copyIndex copies a trusted index to dst (which must not exist), keeping
// its modification time: git tells a racily clean entry from the index
// file's own time, so a copy stamped now would hide a change made in the
// same clock tick as the checkout.
func copyIndex(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err = errors.Join(err, out.Close()); err != nil {
		os.Remove(dst)
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}
