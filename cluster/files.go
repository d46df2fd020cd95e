package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TarDir writes the regular files and folders under dir to w (symlinks and
// anything else are left out: an artifact is a file).
func TarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Bounds of an artifacts tar besides its bytes: a tar of a million empty
// files or of a name nested thousands deep costs serve's disk and inodes
// however few bytes it holds.
const (
	MaxTarEntries = 100000 // files and folders
	MaxTarDepth   = 64     // folders above a name
	MaxTarName    = 4096   // bytes of a whole name (PATH_MAX)
	maxTarElem    = 255    // bytes of one element of a name (NAME_MAX)
)

// Untar extracts r under dir: regular files and folders only, every name
// inside dir (no "..", no absolute path), at most limit bytes in all and
// at most MaxTarEntries entries, MaxTarDepth deep, MaxTarName long. A
// worker's artifacts are data from another machine.
func Untar(r io.Reader, dir string, limit int64) error {
	tr := tar.NewReader(r)
	var total int64
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if entries >= MaxTarEntries {
			return fmt.Errorf("artifacts: more than %d files and folders", MaxTarEntries)
		}
		if err := tarNameOK(h.Name); err != nil {
			return err
		}
		name := filepath.FromSlash(h.Name)
		if filepath.IsAbs(name) || !filepath.IsLocal(name) {
			return fmt.Errorf("artifacts: %q is outside the artifacts folder", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if total += h.Size; total > limit {
				return fmt.Errorf("artifacts: more than %d bytes", limit)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			// O_EXCL with no symlink on the way: a name cannot be made to
			// write elsewhere.
			if fi, err := os.Lstat(filepath.Dir(p)); err != nil || fi.Mode()&os.ModeSymlink != 0 {
				return fmt.Errorf("artifacts: %q: parent is not a folder", h.Name)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("artifacts: %v", err)
			}
			_, err = io.CopyN(f, tr, h.Size)
			f.Close()
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("artifacts: %q is not a file or folder", h.Name)
		}
	}
}

// tarNameOK bounds a name's length and depth.
func tarNameOK(name string) error {
	if len(name) > MaxTarName {
		return fmt.Errorf("artifacts: a name of %d bytes (at most %d)", len(name), MaxTarName)
	}
	elems := strings.Split(strings.Trim(name, "/"), "/")
	if len(elems) > MaxTarDepth+1 {
		return fmt.Errorf("artifacts: %.80q… is %d folders deep (at most %d)", name, len(elems)-1, MaxTarDepth)
	}
	for _, e := range elems {
		if len(e) > maxTarElem {
			return fmt.Errorf("artifacts: %.80q… has an element of %d bytes (at most %d)", name, len(e), maxTarElem)
		}
	}
	return nil
}

// PutFile stores a local file as an object.
func (h *Handles) PutFile(ctx context.Context, name, path string) (int64, error) {
	n, _, err := h.PutFileSum(ctx, name, path)
	return n, err
}

// PutFileSum stores a local file as an object and returns its size and
// the SHA-256 (hex) of the bytes sent: a worker's result names it, so
// serve can tell the object it fetches from the one uploaded.
func (h *Handles) PutFileSum(ctx context.Context, name, path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	info, err := h.Objects.Put(ctx, name, f)
	if err != nil {
		return 0, "", err
	}
	return info.Size, info.SHA256, nil
}

// PutBytes stores b as an object.
func (h *Handles) PutBytes(ctx context.Context, name string, b []byte) (ObjectInfo, error) {
	return h.Objects.Put(ctx, name, bytes.NewReader(b))
}

// GetBytes reads a whole object.
func (h *Handles) GetBytes(ctx context.Context, name string) ([]byte, error) {
	r, _, err := h.Objects.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// ErrObjectsFull is a refused upload: the pool's object store holds all
// it may (ObjectsMaxBytes).
var ErrObjectsFull = errors.New("the cluster's object store is full")

// JetStream's "maximum bytes exceeded" and "insufficient resources" (the
// account's storage).
const (
	errCodeMaxBytes     = 10077
	errCodeInsufficient = 10023
)

func objectsFull(o objectRef, why string) error {
	return fmt.Errorf("%w: %s/%s/%s/%s does not fit in %s (%s); serve frees an attempt's objects when the attempt ends", ErrObjectsFull, o.pool, o.key, o.token, o.file, o.stream(), why)
}

// GetFile writes an object to a local file (mode 0600).
func (h *Handles) GetFile(ctx context.Context, name, path string) (int64, error) {
	n, _, err := h.GetFileSum(ctx, name, path)
	return n, err
}

// GetFileSum writes an object to a local file (mode 0600) and returns its
// size and the SHA-256 (hex) of the bytes written.
func (h *Handles) GetFileSum(ctx context.Context, name, path string) (int64, string, error) {
	res, _, err := h.Objects.Get(ctx, name)
	if err != nil {
		return 0, "", fmt.Errorf("object %s: %v", name, err)
	}
	defer res.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, "", err
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), res)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, hex.EncodeToString(sum.Sum(nil)), err
}

// DeleteObjects removes (serve) an attempt's objects in pool, and the
// chunks of any upload of it cut short.
func (h *Handles) DeleteObjects(ctx context.Context, pool, attemptID string) error {
	return h.purge(ctx, ObjectsStream(pool), attemptObjects(pool, attemptID), 0)
}
