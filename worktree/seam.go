package worktree

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
)

// The seam with the host (docs/sandbox.md, "What a step leaves behind"):
// whatever a sandboxed step could write is hostile input to kusaw's git
// outside. Nothing here follows a symbolic link, opens a FIFO, socket or
// device, or believes a ref that is not exactly one object id.

// Finding is one thing a step left that kusaw refused or repaired.
type Finding struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"`   // symbolic link, FIFO, symbolic ref, ...
	Action string `json:"action"` // removed, refused
}

func (f Finding) String() string { return fmt.Sprintf("%s: %s (%s)", f.Path, f.Kind, f.Action) }

// kindOf names a file type that is neither a regular file nor a folder.
func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		return "device"
	case m.IsDir():
		return "folder"
	case m.IsRegular():
		return "regular file"
	}
	return "irregular file"
}

var oidForm = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})\n?$`) })

// maxRefSize: a loose ref is an object id and a newline.
const maxRefSize = 128

// errNotRef says a ref file is not of the one form kusaw accepts.
var errNotRef = errors.New("not a ref kusaw accepts")

// notRef is what was found where a ref (or another small git file) was
// expected: Kind is short ("symbolic link", "FIFO", "symbolic ref").
type notRef struct{ Path, Kind string }

func (e *notRef) Error() string        { return e.Path + " is a " + e.Kind + ", not a ref kusaw accepts" }
func (e *notRef) Is(target error) bool { return target == errNotRef }

// kindOfErr returns the short kind a notRef error names, or its text.
func kindOfErr(err error) string {
	var n *notRef
	if errors.As(err, &n) {
		return n.Kind
	}
	return err.Error()
}

// readRefFile reads a loose ref file without trusting it: it must be a
// regular file with one link, holding exactly one object id. ok is false
// when there is no file. A symbolic ref, a link, a FIFO or anything else
// is an error wrapping errNotRef that names what was found.
func readRefFile(path string) (sha string, ok bool, err error) {
	b, err := readRegular(path, maxRefSize)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if !oidForm().Match(b) {
		what := "file that is not one object id"
		if strings.HasPrefix(string(b), "ref:") {
			what = "symbolic ref"
		}
		return "", false, &notRef{path, what}
	}
	return strings.TrimSpace(string(b)), true, nil
}

// readRegular reads a small file that must be a regular file with a single
// link: lstat first, then open with O_NOFOLLOW|O_NONBLOCK (a FIFO swapped
// in between neither blocks nor is read) and check the open file again.
func readRegular(path string, max int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := regularOne(path, fi); err != nil {
		return nil, err
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &notRef{path, "file that cannot be opened without following a link (" + err.Error() + ")"}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, err
	}
	if err := regularOne(path, fi); err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, &notRef{path, fmt.Sprintf("file of %d bytes (more than %d)", fi.Size(), max)}
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}

// regularOne accepts a regular file with one link: a hard link would make
// a write to it a write to some other file.
func regularOne(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return &notRef{path, kindOf(fi.Mode())}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return &notRef{path, "hard link"}
	}
	return nil
}

// Scrub removes from dir everything that is neither a regular file with
// one link nor a folder (symbolic links, FIFOs, sockets, devices, hard
// links), without following any link. kusaw runs git on the worktree's
// private git folder afterwards (git itself opens files such as locked and
// logs/HEAD there); after Scrub, nothing in it can block a reader or
// redirect a write. It keeps going past what it cannot remove and reports
// every finding.
func Scrub(dir string) ([]Finding, error) {
	var out []Finding
	var errs []error
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		if regularOne(p, fi) == nil {
			return nil
		}
		kind := kindOfErr(regularOne(p, fi))
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
			out = append(out, Finding{Path: p, Kind: kind, Action: "refused (cannot remove: " + err.Error() + ")"})
			return nil
		}
		out = append(out, Finding{Path: p, Kind: kind, Action: "removed"})
		return nil
	})
	return out, errors.Join(append(errs, err)...)
}

// refPath is the loose file of a full ref name under a git folder.
func refPath(gitDir, ref string) string {
	return filepath.Join(gitDir, filepath.FromSlash(ref))
}

// ownRef reads the attempt branch's loose ref in the repository (where
// kusaw's own git wrote it), checked like anything a step could write; a
// missing loose file falls back to packed-refs, which no step can write.
func (r *Repo) ownRef(ref string) (string, bool, error) {
	sha, ok, err := readRefFile(refPath(r.CommonDir, ref))
	if err != nil || ok {
		return sha, ok, err
	}
	return r.rd.ref(ref)
}

// ScrubObjects readies a step's private object folder for kusaw's import:
// git opens its loose objects and packs by name, so links, FIFOs and the
// like are removed first (Scrub), and so are the folder's own alternates
// (info/alternates, info/http-alternates), which would point git at
// folders the step chose.
func ScrubObjects(objDir string) ([]Finding, error) {
	found, err := Scrub(objDir)
	for _, f := range []string{"alternates", "http-alternates"} {
		p := filepath.Join(objDir, "info", f)
		if _, lerr := os.Lstat(p); lerr == nil {
			fd := Finding{Path: p, Kind: "alternates file", Action: "removed"}
			if rerr := os.Remove(p); rerr != nil {
				fd.Action = "refused (cannot remove: " + rerr.Error() + ")"
				err = errors.Join(err, rerr)
			}
			found = append(found, fd)
		}
	}
	return found, err
}

// ScrubNested readies the worktree for kusaw's `git add --all`: git reads
// the HEAD of every repository nested in it (to record a gitlink), so a
// nested .git folder loses its links, FIFOs and the like (Scrub), and a
// nested .git file, whose pointer git would follow anywhere, is removed.
// The worktree's own .git file stays. Nothing is followed on the way.
func ScrubNested(wt string) ([]Finding, error) {
	var out []Finding
	var errs []error
	_ = filepath.WalkDir(wt, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == wt || d.Name() != ".git" {
			return nil
		}
		if filepath.Dir(p) == wt && !d.IsDir() {
			return nil // the worktree's own .git file (read-only in the sandbox)
		}
		if d.IsDir() {
			f, err := Scrub(p)
			out = append(out, f...)
			errs = append(errs, err)
			return fs.SkipDir
		}
		f := Finding{Path: p, Kind: "nested .git " + kindOf(d.Type()), Action: "removed"}
		if d.Type().IsRegular() {
			f.Kind = "nested .git file (a pointer git would follow)"
		}
		if err := os.Remove(p); err != nil {
			f.Action = "refused (cannot remove: " + err.Error() + ")"
			errs = append(errs, err)
		}
		out = append(out, f)
		return nil
	})
	return out, errors.Join(errs...)
}
