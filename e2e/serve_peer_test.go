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

// Issue 24, finding 3: a sandboxed step of one factory that can see
// another factory's serve socket (here bound in with allow_read, as a
// leak would) tries to queue that factory's gated pipeline and approve its
// gate. serve refuses every request of a process in a sandbox (403
// peer_refused): nothing is queued, the gate still waits. The twin: the
// CLI on the host (kusaw run through serve, kusaw runs, kusaw approve)
// works. As root and as uid 65534, the second factory's state folder
// under /var/tmp.
func TestServeRefusesSandboxOfAnotherFactory(t *testing.T) {
	needSandbox(t)
	need(t, "curl")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			other, _ := seamDir(t, uid)
			writeFile(t, filepath.Join(other, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [build, deploy]
  quick: [build]
steps:
  build:
    run: [sh, -c, "echo b > b.txt"]
  deploy:
    gate: {message: "deploy?"}
    run: [sh, -c, "echo deployed > d.txt"]
`)
			serveErr := startServeAs(t, uid, other)
			sock := filepath.Join(other, ".kusaw", "serve", "serve.sock")

			// Twin: the host's CLI goes through serve.
			if res := runKusawAs(t, uid, 2*time.Minute, other, "run", "quick"); res.code != 0 {
				t.Fatalf("kusaw run through serve: %d\n%s%s\n%s", res.code, res.stdout, res.stderr, serveErr())
			}
			quick := onlyRun(t, other)
			if !strings.Contains(serveErr(), quick) {
				t.Fatalf("run %s did not go through serve:\n%s", quick, serveErr())
			}
			// The gated run, queued from the host: it waits at the gate.
			out := curlAs(t, uid, sock, "runs", `{"pipeline":"default"}`)
			if !strings.Contains(out, "HTTP 201") {
				t.Fatalf("the host's POST /v1/runs: %s", out)
			}
			var gated string
			waitFor(t, "the run at the gate", time.Minute, func() bool {
				for _, id := range runIDs(t, other) {
					if id != quick && loadDetail(t, other, id).State == "waiting" {
						gated = id
						return true
					}
				}
				return false
			})

			// The attack, from a sandboxed step of another factory.
			dir, _ := seamDir(t, uid)
			script := fmt.Sprintf(`for r in 'runs {"pipeline":"default"}' 'runs/%[1]s/approve {"step":"deploy"}' 'runs/%[1]s/cancel {}'; do set -- $r; curl -sS --max-time 10 --unix-socket %[2]s -H "Content-Type: application/json" -d "$2" -w " HTTP %%{http_code}\n" "http://serve/v1/$1"; done; echo tried`, gated, sock)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
sandbox:
  mode: required
  allow_read: [`+filepath.Dir(sock)+`]
pipelines:
  default: [attack]
steps:
  attack:
    run: [sh, -c, '`+strings.ReplaceAll(script, "'", "''")+`']
`)
			if res := runKusawAs(t, uid, 2*time.Minute, dir, "run"); res.code != 0 {
				t.Fatalf("the attacking run: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			got := readFile(t, filepath.Join(dir, ".kusaw", "runs", onlyRun(t, dir), "steps", "attack", "1", "stdout.log"))
			if strings.Count(got, "HTTP 403") != 3 || strings.Count(got, `"peer_refused"`) != 3 || !strings.Contains(got, "tried") {
				t.Fatalf("the sandboxed step was not refused three times:\n%s", got)
			}
			if ids := runIDs(t, other); len(ids) != 2 {
				t.Fatalf("the other factory has runs %v; the step queued one", ids)
			}
			if d := loadDetail(t, other, gated); d.State != "waiting" {
				t.Fatalf("the gate did not wait: %+v", d)
			}
			if !strings.Contains(serveErr(), "refused a connection to serve's socket") {
				t.Fatalf("serve did not log the refusals:\n%s", serveErr())
			}
			verifyRecords(t, uid, dir)

			// Twin: the host's kusaw runs and kusaw approve through serve.
			if res := runKusawAs(t, uid, time.Minute, other, "runs"); res.code != 0 || !strings.Contains(res.stdout, gated) {
				t.Fatalf("kusaw runs: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			// Root cannot be checked by a serve of another user (its
			// /proc entries are not that user's to read): refused, and
			// told so, rather than run in-process beside serve.
			if uid != os.Geteuid() {
				res := runKusawAs(t, os.Geteuid(), time.Minute, other, "runs")
				if res.code != 6 || !strings.Contains(res.stderr, "is running but refused this process") || !strings.Contains(res.stderr, "connect as the user kusaw runs as (uid 65534)") {
					t.Fatalf("root's kusaw runs against uid %d's serve: %d\n%s%s", uid, res.code, res.stdout, res.stderr)
				}
			}
			if res := runKusawAs(t, uid, time.Minute, other, "approve", gated); res.code != 0 {
				t.Fatalf("kusaw approve: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			waitFor(t, "the approved run", time.Minute, func() bool { return loadDetail(t, other, gated).State == "succeeded" })
		})
	}
}

// startServeAs runs kusaw serve for dir as uid until the test ends and
// returns its stderr so far.
func startServeAs(t *testing.T, uid int, dir string) func() string {
	t.Helper()
	cmd := exec.Command(kusawBin, "serve", "--grace=2s")
	cmd.Dir = dir
	cmd.Env = testEnv(t, dir)
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		chownAll(t, dir, uid)
	}
	errb := &syncBuffer{}
	cmd.Stderr = errb
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
	waitFor(t, "kusaw serve", 20*time.Second, func() bool {
		return strings.Contains(errb.String(), "kusaw serve ready")
	})
	return errb.String
}

// curlAs posts body to serve's /v1/PATH through sock as uid, from the host.
func curlAs(t *testing.T, uid int, sock, path, body string) string {
	t.Helper()
	cmd := exec.Command("curl", "-sS", "--max-time", "10", "--unix-socket", sock, "-H", "Content-Type: application/json", "-d", body, "-w", " HTTP %{http_code}\n", "http://serve/v1/"+path)
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v %s", err, out)
	}
	return string(out)
}

// runIDs lists the runs recorded under dir's state folder.
func runIDs(t *testing.T, dir string) []string {
	t.Helper()
	var ids []string
	entries, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
	for _, e := range entries {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids
}
