//go:build linux

package sandbox

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The attack: kusaw runs as a normal user; the step copies the login's
// credentials file into a folder of its login copy and takes that
// folder's permissions away (chmod 000). os.RemoveAll stops there, so the
// copy of the user's token outlived the attempt in the state folder. The
// login copy goes all the same (rmtree). The twin: the credentials file
// itself is still carried back (TestLoginCredentialsCarriedBack and the
// e2e tests); here the copy's own credentials are left out.
func TestLoginCopyLockedFolderRemoved(t *testing.T) {
	if dir := os.Getenv("KUSAW_TEST_LOGIN_LOCKED"); dir != "" {
		lockedLoginCase(t, dir)
		return
	}
	lockedLoginCase(t, t.TempDir())
	if os.Geteuid() != 0 {
		return // the case above ran as this normal user
	}
	// As root permissions do not bind: the same as uid 65534, from a copy
	// of this test binary in a folder it may read.
	dir, err := os.MkdirTemp("", "kusaw-login-locked-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "sandbox.test")
	in, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, in)
	in.Close()
	if err := errors.Join(err, out.Close()); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	os.Chown(work, 65534, 65534)
	cmd := exec.Command(bin, "-test.run", "^TestLoginCopyLockedFolderRemoved$", "-test.v")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "KUSAW_TEST_LOGIN_LOCKED="+work, "HOME="+work, "TMPDIR="+work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "--- PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, b)
	}
}

func lockedLoginCase(t *testing.T, dir string) {
	src := filepath.Join(dir, "home", ".claude")
	cp := filepath.Join(dir, "attempt", "login", "0")
	for _, d := range []string{src, filepath.Join(cp, "projects", "stash")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cp, "projects", "stash", ".credentials.json"), []byte(`{"token":"users-token"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(cp, "projects", "stash"), 0); err != nil {
		t.Fatal(err)
	}
	p := &Plan{LoginCopies: []LoginCopy{{Src: src, Dst: "/home/u/.claude", Copy: cp, Dir: true}}}
	if err := p.finishLogin(); err != nil {
		t.Fatalf("as uid %d: %v", os.Geteuid(), err)
	}
	if _, err := os.Lstat(cp); err == nil {
		t.Fatalf("as uid %d: the login copy (with a copy of the token) is still there", os.Geteuid())
	}
}
