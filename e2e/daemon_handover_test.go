package e2e

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeHandsOverToDaemon: kusaw serve becomes kusaw-daemon in the same
// process (the pid the caller started, as service managers and signals
// expect), answers with the token kusaw read, and the token is on neither
// the daemon's command line nor its environment, which other local
// processes of the user can read. SIGTERM still stops it cleanly.
func TestServeHandsOverToDaemon(t *testing.T) {
	dir := factoryDir(t, "version: 1\nrepos:\n  app: {path: app}\npipelines:\n  default: [t]\nsteps:\n  t: {run: [\"true\"]}\n", "app")
	const secret = "tok-handover-5f3e9a0c1b"
	tok := filepath.Join(dir, "token")
	writeFile(t, tok, secret+"\n")
	if err := os.Chmod(tok, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	sp := startServeEnv(t, dir, []string{"KUSAW_TOKEN_FILE=" + tok}, "--listen", addr)
	pid := sp.cmd.Process.Pid
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(exe) != "kusaw-daemon" || filepath.Dir(exe) != filepath.Dir(kusawBin) {
		t.Errorf("pid %d runs %s, want kusaw-daemon beside %s", pid, exe, kusawBin)
	}
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("serve's token is in the daemon's %s: %q", f, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	get := func(token string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/health", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, "serve to listen", 20*time.Second, func() bool { return get("") != 0 })
	if c := get(secret); c != http.StatusOK {
		t.Errorf("the token kusaw handed over: %d\n%s", c, sp.stderr.String())
	}
	if c := get("not-the-token"); c != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", c)
	}
	sp.stop(t)
}

// TestDaemonMissingOrByHand: without kusaw-daemon beside it, kusaw serve and
// kusaw worker refuse with exit 6 (serve unavailable) naming the program,
// where it was looked for and how to install it; kusaw's own checks still
// come first (a bad flag is exit 2). kusaw-daemon run by hand says what to
// run instead, exit 2.
func TestDaemonMissingOrByHand(t *testing.T) {
	dir := factoryDir(t, "version: 1\nrepos:\n  app: {path: app}\npipelines:\n  default: [t]\nsteps:\n  t: {run: [\"true\"]}\n", "app")
	lone := loneKusaw(t)
	for _, args := range [][]string{{"serve"}, {"worker", "--state-dir", filepath.Join(t.TempDir(), "w")}} {
		cmd := exec.Command(lone, args...)
		cmd.Dir, cmd.Env = dir, testEnv(t, dir)
		out, err := cmd.CombinedOutput()
		want := filepath.Join(filepath.Dir(lone), "kusaw-daemon")
		if exitCode(err) != 6 || !strings.Contains(string(out), want) || !strings.Contains(string(out), "make install") {
			t.Errorf("kusaw %s without kusaw-daemon: exit %d: %s", args[0], exitCode(err), out)
		}
	}
	cmd := exec.Command(lone, "serve", "--no-such-flag")
	cmd.Dir, cmd.Env = dir, testEnv(t, dir)
	if out, err := cmd.CombinedOutput(); exitCode(err) != 2 || !strings.Contains(string(out), "--no-such-flag") {
		t.Errorf("a bad flag: exit %d: %s", exitCode(err), out)
	}
	out, err := exec.Command(filepath.Join(filepath.Dir(kusawBin), "kusaw-daemon"), "serve").CombinedOutput()
	if exitCode(err) != 2 || !strings.Contains(string(out), "kusaw serve --help") {
		t.Errorf("kusaw-daemon by hand: exit %d: %s", exitCode(err), out)
	}
}
