//go:build linux

package serve

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// On a real full file system (a 1 MB tmpfs) the write test fails with
// ENOSPC and names the folder; once the filler is removed it passes.
func TestStateHealthOnAFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test mounts a 1 MB tmpfs and needs root: run it as root (CI does)")
		}
		t.Skip("needs root to mount a tmpfs (TestStateHealthFollowsTheWriteTest covers the rest)")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v\n%s", mnt, err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	var logs bytes.Buffer
	h := newStateHealth(mnt, zerolog.New(&logs))
	now := time.Now()
	h.now = func() time.Time { return now }
	if sh := h.health(); !sh.Writable {
		t.Fatalf("an empty tmpfs: %+v", sh)
	}
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 2<<20)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	f.Close()
	now = now.Add(writeTestEvery)
	sh := h.health()
	if sh.Writable || !strings.Contains(sh.Message, mnt) || !strings.Contains(sh.Message, "no space left on device") || !strings.Contains(sh.Fix, "df -h "+mnt) {
		t.Fatalf("a full tmpfs: %+v", sh)
	}
	if !strings.Contains(logs.String(), "the state folder takes no writes") {
		t.Errorf("serve's log says nothing of it: %s", logs.String())
	}
	// The write test leaves nothing behind, full or not.
	if ents, _ := os.ReadDir(mnt); len(ents) != 1 {
		t.Errorf("the tmpfs holds %v", ents)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	now = now.Add(writeTestEvery)
	if sh := h.health(); !sh.Writable || !strings.Contains(logs.String(), "writable again") {
		t.Fatalf("after the filler went: %+v\n%s", sh, logs.String())
	}
}
