//go:build linux

package confine

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// openInherited opens a file the way a careless parent leaves one: no
// close-on-exec.
func openInherited(t *testing.T) int {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(p, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if cloexec(t, fd) {
		t.Fatalf("descriptor %d is close-on-exec already; the test proves nothing", fd)
	}
	return fd
}

func cloexec(t *testing.T, fd int) bool {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatalf("F_GETFD %d: %v", fd, err)
	}
	return flags&unix.FD_CLOEXEC != 0
}

func TestCloseInheritedOnExecMarksEveryDescriptorAboveStderr(t *testing.T) {
	fd := openInherited(t)
	if err := CloseInheritedOnExec(); err != nil {
		t.Fatal(err)
	}
	if !cloexec(t, fd) {
		t.Errorf("descriptor %d is still inherited across exec", fd)
	}
	// Marked, not closed: the process itself still reads it.
	var b [1]byte
	if n, err := unix.Pread(fd, b[:], 0); n != 1 || err != nil {
		t.Errorf("descriptor %d no longer readable: %d, %v", fd, n, err)
	}
	// stdin, stdout and stderr stay as they were.
	for _, std := range []int{0, 1, 2} {
		if flags, err := unix.FcntlInt(uintptr(std), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC != 0 {
			t.Errorf("descriptor %d was marked close-on-exec", std)
		}
	}
}

// A kernel without close_range's CLOSE_RANGE_CLOEXEC (before 5.11): the
// list of /proc/self/fd does it.
func TestCloseInheritedOnExecWithoutCloseRange(t *testing.T) {
	old := closeRange
	closeRange = func(uint, uint, uint) error { return unix.EINVAL }
	t.Cleanup(func() { closeRange = old })
	fd := openInherited(t)
	if err := CloseInheritedOnExec(); err != nil {
		t.Fatal(err)
	}
	if !cloexec(t, fd) {
		t.Errorf("descriptor %d is still inherited across exec", fd)
	}
}

// Neither close_range nor the list: kusaw refuses to start a step,
// naming the folder.
func TestCloseInheritedOnExecFailsClosed(t *testing.T) {
	err := cloexecListed(filepath.Join(t.TempDir(), "no-such-fd-folder"))
	if err == nil {
		t.Fatal("marked descriptors from a folder that does not exist")
	}
	t.Log(err)
}
