package worktree

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CopyIgnored copies into dst the files of the checkout at src that match
// one of globs (relative, filepath.Match syntax per path) and that git
// ignores there: what a fresh worktree lacks to build (.env,
// config/local.yaml). Only regular files are copied, never through a
// symbolic link, keeping their permission bits; files in the dot-folders
// of home (~/.ssh, ~/.aws, ...) are never copied whatever the globs say.
// It returns the copied paths, relative, in the order found.
func CopyIgnored(src, dst string, globs []string, home string) ([]string, error) {
	var cands []string
	seen := map[string]bool{}
	for _, g := range globs {
		matches, err := filepath.Glob(filepath.Join(src, filepath.FromSlash(g)))
		if err != nil {
			return nil, fmt.Errorf("include %q: %v", g, err)
		}
		for _, m := range matches {
			rel, err := filepath.Rel(src, m)
			if err != nil || rel == "." || strings.HasPrefix(rel, "..") || seen[rel] || throughLink(src, rel) {
				continue
			}
			seen[rel] = true
			cands = append(cands, rel)
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	ignored, err := checkIgnored(src, cands)
	if err != nil {
		return nil, err
	}
	// The worktree may hold links a step committed: every write goes
	// through os.Root, so none leads out of dst.
	root, err := os.OpenRoot(dst)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var copied []string
	for _, rel := range cands {
		if !ignored[rel] || underHomeDotFolder(filepath.Join(src, rel), home) {
			continue
		}
		ok, err := copyRegular(filepath.Join(src, rel), root, rel)
		if err != nil {
			return copied, fmt.Errorf("include %s: %v", rel, err)
		}
		if ok {
			copied = append(copied, filepath.ToSlash(rel))
		}
	}
	return copied, nil
}

// RemoveCopied removes the files CopyIgnored copied into dst. The worktree
// is the step's: a folder on the way may be a link it put there, so the
// removal goes through os.Root and never leaves dst.
func RemoveCopied(dst string, files []string) {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return
	}
	defer root.Close()
	for _, f := range files {
		_ = root.Remove(filepath.FromSlash(f))
	}
}

// throughLink: a folder on the way from src to rel is a symbolic link
// (git refuses such paths, and kusaw never copies through one).
func throughLink(src, rel string) bool {
	parts := strings.Split(filepath.Dir(rel), string(filepath.Separator))
	p := src
	for _, part := range parts {
		if part == "." {
			continue
		}
		p = filepath.Join(p, part)
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return true
		}
	}
	return false
}

// checkIgnored asks git which of paths the checkout ignores.
func checkIgnored(dir string, paths []string) (map[string]bool, error) {
	cmd := exec.Command("git", "-c", "core.fsmonitor=false", "check-ignore", "-z", "--stdin")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\x00") + "\x00")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// Exit 1 means "none ignored".
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			return nil, fmt.Errorf("git check-ignore: %v: %s", err, strings.TrimSpace(errb.String()))
		}
	}
	got := map[string]bool{}
	for _, p := range strings.Split(out.String(), "\x00") {
		if p != "" {
			got[filepath.FromSlash(p)] = true
		}
	}
	return got, nil
}

// underHomeDotFolder: p lies in a dot-folder (or is a dot-file) of home.
func underHomeDotFolder(p, home string) bool {
	if home == "" {
		return false
	}
	real, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return true // cannot tell: do not copy
	}
	real = filepath.Join(real, filepath.Base(p))
	rel, err := filepath.Rel(home, real)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return false
	}
	return strings.HasPrefix(strings.Split(rel, string(filepath.Separator))[0], ".")
}

// copyRegular copies a regular file without following a link at src to
// rel under root; false when src is not a regular file, dst exists or a
// link on the way would lead out of root.
func copyRegular(src string, root *os.Root, rel string) (bool, error) {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP {
			return false, nil
		}
		return false, err
	}
	in := os.NewFile(uintptr(fd), src)
	defer in.Close()
	fi, err := in.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false, err
	}
	if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
		return false, fmt.Errorf("not written in the worktree (a link there leads out of it?): %v", err)
	}
	out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if os.IsExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, err
	}
	return true, out.Close()
}
