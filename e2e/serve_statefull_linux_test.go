//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/serve/client"
)

// A full state folder is reported by serve's health and kusaw service
// status, with the folder and the fix, and recovers once space is freed:
// a 3 MB tmpfs holds the state, a step prints 10 MB, its attempt fails
// with state.write_failed; removing its stdout.log makes the folder
// writable again and a run then succeeds. serve's web page shows the
// full folder with its fix, and stops showing it once it is writable.
func TestServeHealthReportsFullStateFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test mounts a 3 MB tmpfs as the state folder and needs root: run it as root (CI does)")
		}
		t.Skip("needs root to mount a tmpfs (serve's TestStateHealthFollowsTheWriteTest covers the logic)")
	}
	dir := factoryDir(t, `version: 1
repos:
  app:
    path: app
serve:
  listen: 127.0.0.1:0
pipelines:
  flood: [flood]
  ok: [hello]
steps:
  flood:
    run: [sh, -c, "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -c 10000000"]
  hello:
    run: [sh, -c, "echo hello"]
`, "app")
	state := filepath.Join(dir, ".kusaw")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", state).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v\n%s", state, err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(state, syscall.MNT_DETACH) })
	token := "statefull-test-token-0123456789"
	set := exec.Command(kusawBin, "config", "set", serve.TokenSecretKey, "--secret")
	set.Dir, set.Env, set.Stdin = dir, testEnv(t, dir), strings.NewReader(token)
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("storing the token: %v\n%s", err, out)
	}
	sp := startServe(t, dir)
	var info client.ServeInfo
	if b, err := os.ReadFile(filepath.Join(state, record.ServeInfoFile)); err != nil || json.Unmarshal(b, &info) != nil || info.Listen == "" {
		t.Fatalf("serve.json: %v %s", err, b)
	}
	page := startChromium(t, needChromium(t))
	if err := page.call("Page.navigate", map[string]any{"url": "http://" + info.Listen + "/?token=" + token}, nil); err != nil {
		t.Fatal(err)
	}
	alert := func() string {
		v, _ := page.eval(`(() => { const a = document.getElementById("serve-alert"); return document.body.dataset.page === "runs" && a ? (a.hidden ? "hidden" : a.textContent) : "" })()`)
		s, _ := v.(string)
		return s
	}
	waitFor(t, "the runs page, without an alert", 30*time.Second, func() bool { return alert() == "hidden" })

	status := func() (result, map[string]any) {
		t.Helper()
		res := runKusaw(t, dir, "service", "status", "--json")
		var st struct {
			Serve struct {
				State map[string]any `json:"state"`
			} `json:"serve"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || st.Serve.State == nil {
			t.Fatalf("service status --json: %v\n%s%s", err, res.stdout, res.stderr)
		}
		return res, st.Serve.State
	}
	if res, st := status(); res.code == 6 || st["writable"] != true || st["dir"] != state {
		t.Fatalf("before the flood: exit %d, state %v", res.code, st)
	}

	run := runKusaw(t, dir, "run", "flood")
	if run.code != 1 || !strings.Contains(run.stderr, "state.write_failed") {
		t.Fatalf("kusaw run flood: exit %d\n%s%s", run.code, run.stdout, run.stderr)
	}
	id := lastRun(t, dir)
	res := runKusaw(t, dir, "service", "status")
	for _, want := range []string{"state:     " + state + " FULL or not writable", "attempts fail with state.write_failed",
		"no space left on device", "step flood (run " + id + ")", "fix:       free space on the file system that holds " + state + " (df -h " + state + ")"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("service status lacks %q:\n%s", want, res.stdout)
		}
	}
	t.Logf("kusaw service status with a full state folder:\n%s", res.stdout)
	if res.code != 6 {
		t.Errorf("service status with a full state folder: exit %d, want 6", res.code)
	}
	h, err := sp.client.Health(context.Background())
	if err != nil || h.OK || h.State == nil || h.State.Writable || h.State.Dir != state {
		t.Fatalf("/v1/health with a full state folder: %+v %v", h, err)
	}

	var shown string
	waitFor(t, "the web page to show the full state folder", 20*time.Second, func() bool {
		shown = alert()
		return strings.Contains(shown, "State folder full or not writable: "+state)
	})
	for _, want := range []string{"state.write_failed", "Fix: free space on the file system that holds " + state} {
		if !strings.Contains(shown, want) {
			t.Errorf("the web page's alert lacks %q: %s", want, shown)
		}
	}

	// Space is freed: serve notices at its next write test.
	if err := os.Remove(filepath.Join(state, "runs", id, "steps", "flood", "1", "stdout.log")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to report the state folder writable", 15*time.Second, func() bool {
		_, st := status()
		return st["writable"] == true
	})
	if res := runKusaw(t, dir, "service", "status"); res.code == 6 || !strings.Contains(res.stdout, "state:     "+state+" writable") {
		t.Fatalf("after space was freed: exit %d\n%s", res.code, res.stdout)
	}
	if h, err := sp.client.Health(context.Background()); err != nil || !h.OK {
		t.Fatalf("/v1/health after space was freed: %+v %v", h, err)
	}
	waitFor(t, "the web page to drop the alert", 20*time.Second, func() bool { return alert() == "hidden" })
	if ok := runKusaw(t, dir, "run", "ok"); ok.code != 0 {
		t.Fatalf("a run after space was freed: exit %d\n%s%s", ok.code, ok.stdout, ok.stderr)
	}
}
