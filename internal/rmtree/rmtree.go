// Package rmtree removes folders a step may have made hard to remove:
// kusaw removes what a step wrote (worktrees, the attempt's temp folder,
// the agent's login copy) as a user whom permissions bind, and a step
// that took away its folders' permissions must not make its files outlive
// the attempt.
package rmtree

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveAll removes a tree even where the step took away the
// permissions of its own folders, however deep it nested them. It never
// follows symbolic links. os.RemoveAll comes first (it handles any depth
// but stops at a folder it may not read); then the tree is removed folder
// by folder relative to open descriptors, giving each folder back its
// owner's permissions first: a path walk would stop at PATH_MAX, and a
// step that made a chain deeper than that with an unreadable folder at its
// end had its tree stay where no cleaning removed it.
func RemoveAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	parent, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	return removeAt(parent, filepath.Base(dir))
}

// RemoveAt is RemoveAll of name in the folder open as dirfd (one found
// without following a link: a tree a step wrote, entered by descriptor),
// never leaving that folder.
func RemoveAt(dirfd int, name string) error { return removeAt(dirfd, name) }

// removeAt removes name in the folder open as dirfd, and all below it.
func removeAt(dirfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ignoreMissing(unix.Unlinkat(dirfd, name, 0))
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err == nil {
		return nil
	}
	// Checked a folder just above; fchmodat cannot refuse links on
	// Linux, so the folder opened next must be that same one.
	_ = unix.Fchmodat(dirfd, name, 0o700, 0)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
		unix.Close(fd)
		return errors.Join(err, errors.New("a folder changed while it was removed: "+name))
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, n := range names {
		errs = append(errs, removeAt(fd, n))
	}
	f.Close()
	errs = append(errs, ignoreMissing(unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)))
	return errors.Join(errs...)
}

func ignoreMissing(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
