package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The sandbox's view is an allowlist (docs/sandbox.md): another factory's
// serve on the same machine, its state folder in its project folder under
// /srv or in a state_dir under /var/tmp, does not exist inside. The
// attack: a sandboxed step queues the other factories' deploy pipeline
// through their serve sockets (which take no token). The twin: the same
// request from outside is served. As root and as a normal user, each
// factory run by the same user.
func TestViewOtherFactoriesServeUnreachable(t *testing.T) {
	need(t, "bwrap")
	need(t, "curl")
	need(t, "git")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			top := "/srv"
			if os.Geteuid() != 0 {
				top = "/var/tmp" // /srv is root's to write
			}
			// Victim 1: its project folder (and so its state folder) under /srv.
			v1 := victimFactory(t, uid, top, "")
			// Victim 2: a state_dir of its own under /var/tmp.
			state2, err := os.MkdirTemp("/var/tmp", "kusaw-e2e-state-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(state2) })
			v2 := victimFactory(t, uid, "/var/tmp", state2)
			socks := []string{filepath.Join(v1.state, "serve", "serve.sock"), filepath.Join(state2, "serve", "serve.sock")}

			dir, _ := seamDir(t, uid)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: app}
sandbox: {mode: required}
pipelines:
  default: [probe]
steps:
  probe:
    run: [sh, -c, 'for s in "$@"; do curl -sS --max-time 5 --unix-socket "$s" -H "Content-Type: application/json" -d "{\"pipeline\":\"deploy\"}" http://serve/v1/runs && echo "REACHED $s"; ls -d "$(dirname "$s")" 2>&1; done; true', sh, `+strings.Join(socks, ", ")+`]
`)
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run")
			if res.code != 0 {
				t.Fatalf("kusaw run: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			out := ""
			logs, _ := filepath.Glob(filepath.Join(dir, ".kusaw", "runs", "*", "steps", "probe", "1", "*.log"))
			for _, l := range logs {
				out += readFile(t, l)
			}
			if strings.Contains(out, "REACHED") || !strings.Contains(out, "curl") {
				t.Errorf("the step reached another factory's serve (or never tried):\n%s", out)
			}
			for _, v := range []*victim{v1, v2} {
				if n := v.deploys(t); n > 0 {
					t.Errorf("a sandboxed step of another factory queued %s's deploy (%d runs)", v.dir, n)
				}
			}
			verifyRecords(t, uid, dir)
			// Twin: the victims' own user runs deploy through their serve.
			for _, v := range []*victim{v1, v2} {
				if r := runKusawAs(t, uid, 2*time.Minute, v.dir, "run", "deploy"); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "deploy") || v.deploys(t) != 1 {
					t.Errorf("the legitimate run of deploy in %s failed: %d (%d runs)\n%s%s", v.dir, r.code, v.deploys(t), r.stdout, r.stderr)
				}
			}
		})
	}
}

type victim struct {
	dir, state string
	stderr     *syncBuffer
}

// deploys counts the victim's runs of its deploy pipeline, from its
// records (serve refuses a client of another user: the test is root).
func (v *victim) deploys(t *testing.T) int {
	t.Helper()
	n := 0
	files, _ := filepath.Glob(filepath.Join(v.state, "runs", "*", "run.json"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), `"pipeline": "deploy"`) {
			n++
		}
	}
	return n
}

// victimFactory makes a factory under top with a deploy pipeline, owned by
// uid, and starts its serve as uid; state is its state_dir ("" for .kusaw).
func victimFactory(t *testing.T, uid int, top, state string) *victim {
	t.Helper()
	dir, err := os.MkdirTemp(top, "kusaw-e2e-victim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	newRepo(t, dir, "app")
	v := &victim{dir: dir, state: filepath.Join(dir, ".kusaw")}
	sd := ""
	if state != "" {
		v.state, sd = state, "state_dir: "+state+"\n"
		os.Chmod(state, 0o755)
	}
	writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
`+sd+`repos:
  app: {path: app}
pipelines:
  default: [noop]
  deploy: [deploy]
steps:
  noop:
    run: [sh, -c, "true"]
  deploy:
    run: [sh, -c, "echo deploy done"]
`)
	chownAll(t, dir, uid)
	if state != "" {
		chownAll(t, state, uid)
	}
	cmd := exec.Command(kusawBin, "serve", "--grace=2s")
	cmd.Dir = dir
	cmd.Env = testEnv(t, dir)
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	// Ready when it says so (its socket serves only its own user).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "kusaw serve ready") {
		if time.Now().After(deadline) {
			t.Fatalf("kusaw serve of %s did not come up:\n%s", dir, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	v.stderr = stderr
	return v
}
