package sandbox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestViewHidesRootOnlyFilesOfEtc: /etc is in every view, and kusaw often
// runs as root, whose uid the sandbox keeps: a step as root could read
// every file of /etc that only root (or a group) may read — a TLS key in
// /etc/ssl/private, a WireGuard or VPN config, a service's credentials —
// beyond the few names a list hid. What the mode bits keep from other
// users is hidden, whatever its name: a root-only file, a root-only folder
// and a file in it. The twin: the world-readable files tools need
// (passwd, hosts, the TLS roots) are there.
func TestViewHidesRootOnlyFilesOfEtc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bubblewrap's view of /etc")
	}
	needRoot(t, "the attack is root's: only root can read (and plant) root-only files of /etc")
	needSandbox(t, "the attack runs the real sandbox")
	dir, err := os.MkdirTemp("/etc", "kusaw-redteam-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeFromEtc(dir) })
	os.Chmod(dir, 0o755)
	key := filepath.Join(dir, "service.key") // 0600: like an ssl or VPN key
	write(t, key, "ROOT-ONLY-KEY\n")
	os.Chmod(key, 0o600)
	group := filepath.Join(dir, "group-only.conf") // 0640 root:root
	write(t, group, "GROUP-ONLY-SECRET\n")
	os.Chmod(group, 0o640)
	private := filepath.Join(dir, "private") // 0700 folder, its file 0644
	write(t, filepath.Join(private, "inner.pem"), "PRIVATE-FOLDER-SECRET\n")
	os.Chmod(filepath.Join(private, "inner.pem"), 0o644)
	os.Chmod(private, 0o700)
	public := filepath.Join(dir, "public.conf")
	write(t, public, "PUBLIC-SETTING\n")
	os.Chmod(public, 0o644)
	// The walk skips links without an lstat (a link's mode says nothing):
	// a link to the root-only key must not read it, a link to the public
	// file must (the twin).
	keyLink, publicLink := filepath.Join(dir, "link-to.key"), filepath.Join(dir, "link-to-public.conf")
	if err := os.Symlink("service.key", keyLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("public.conf", publicLink); err != nil {
		t.Fatal(err)
	}

	f := newFixture(t)
	p := mustPlan(t, f.input())
	t.Cleanup(func() { p.Cleanup() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	script := `for f in "$@"; do cat "$f" 2>/dev/null; done; ls "` + private + `" 2>/dev/null; cat /etc/passwd /etc/hosts >/dev/null && ls /etc/ssl/certs >/dev/null && echo TWIN-OK; cat "` + publicLink + `" >/dev/null && echo LINK-TWIN-OK`
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", script, "sh", key, group, filepath.Join(private, "inner.pem"), public, keyLink})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running bwrap: %v", err)
		}
	}
	got := out.String()
	for _, secret := range []string{"ROOT-ONLY-KEY", "GROUP-ONLY-SECRET", "PRIVATE-FOLDER-SECRET", "inner.pem"} {
		if strings.Contains(got, secret) {
			t.Errorf("the step as root read %s from /etc:\n%s", secret, got)
		}
	}
	for _, want := range []string{"PUBLIC-SETTING", "TWIN-OK", "LINK-TWIN-OK"} {
		if !strings.Contains(got, want) {
			t.Errorf("the legitimate read of /etc lacks %s:\n%s", want, got)
		}
	}
}

// removeFromEtc removes a folder this test planted in the host's /etc
// without failing another package's sandbox that starts meanwhile: every
// plan walks /etc and hides what only root may read, and bwrap fails when
// a path it is to hide is gone before it starts ("Can't mkdir parents").
// So the folder is first made readable to all, which no later plan hides,
// and removed only once plans made before have had time to start.
func removeFromEtc(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink == 0 {
			if d.IsDir() {
				os.Chmod(p, 0o755)
			} else {
				os.Chmod(p, 0o644)
			}
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	os.RemoveAll(dir)
}
