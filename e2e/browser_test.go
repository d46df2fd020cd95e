package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/serve/client"
	"golang.org/x/net/websocket"
)

const chromiumInstall = "apt-get update && apt-get install -y chromium"

// needChromium finds Debian's chromium, installing it when missing and
// root; otherwise the test is skipped with the command (a failure in CI).
func needChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Geteuid() == 0 {
		out, err := exec.Command("apt-get", "install", "-y", "chromium").CombinedOutput()
		if err != nil {
			_ = exec.Command("apt-get", "update").Run()
			out, err = exec.Command("apt-get", "install", "-y", "chromium").CombinedOutput()
		}
		if p, lerr := exec.LookPath("chromium"); lerr == nil {
			return p
		}
		t.Logf("installing chromium failed: %v\n%s", err, lastLines(string(out), 5))
	}
	msg := "chromium is not installed; install it as root: " + chromiumInstall
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// cdp is a minimal Chrome DevTools protocol client over one page's
// websocket.
type cdp struct {
	ws *websocket.Conn
	id int
}

func (c *cdp) call(method string, params any, out any) error {
	c.id++
	id := c.id
	if params == nil {
		params = map[string]any{}
	}
	if err := websocket.JSON.Send(c.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return err
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(c.ws, &msg); err != nil {
			return fmt.Errorf("%s: %v", method, err)
		}
		if msg.ID != id {
			continue // an event, or an answer to an earlier call
		}
		if msg.Error != nil {
			return fmt.Errorf("%s: %s", method, msg.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(msg.Result, out)
		}
		return nil
	}
}

// eval runs a JavaScript expression in the page and returns its value.
func (c *cdp) eval(expr string) (any, error) {
	var res struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails any `json:"exceptionDetails"`
	}
	if err := c.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res); err != nil {
		return nil, err
	}
	if res.ExceptionDetails != nil {
		return nil, fmt.Errorf("%s: %v", expr, res.ExceptionDetails)
	}
	return res.Result.Value, nil
}

// startChromium starts headless chromium with remote debugging on a
// loopback port and returns a client of its first page.
func startChromium(t *testing.T, bin string) *cdp {
	t.Helper()
	prof := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--disable-default-apps", "--no-default-browser-check", "--user-data-dir="+prof, "--window-size=1280,1100",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=http://127.0.0.1", "about:blank")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("chromium's stderr:\n%s", stderr.String())
		}
	})
	var port string
	waitFor(t, "chromium's DevTools port", 90*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(prof, "DevToolsActivePort"))
		if err != nil {
			return false
		}
		port = strings.SplitN(string(b), "\n", 2)[0]
		return port != ""
	})
	var pages []struct {
		Type string `json:"type"`
		WS   string `json:"webSocketDebuggerUrl"`
	}
	waitFor(t, "chromium's page target", 10*time.Second, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		pages = nil
		_ = json.NewDecoder(resp.Body).Decode(&pages)
		for _, p := range pages {
			if p.Type == "page" {
				return true
			}
		}
		return false
	})
	for _, p := range pages {
		if p.Type == "page" {
			ws, err := websocket.Dial(p.WS, "", "http://127.0.0.1")
			if err != nil {
				t.Fatalf("DevTools websocket: %v\n%s", err, stderr.String())
			}
			t.Cleanup(func() { ws.Close() })
			return &cdp{ws: ws}
		}
	}
	t.Fatal("no page target")
	return nil
}

// TestBrowserRunPage loads serve's web page in headless Chromium, follows
// a run to its end on the run's page, checks the timeline, attempts,
// events and egress chart, and saves a screenshot in the test's artifact
// directory (go test -artifacts keeps it; KUSAW_SCREENSHOT_DIR copies it).
func TestBrowserRunPage(t *testing.T) {
	need(t, "git")
	bin := needChromium(t)
	// An upstream on loopback for the sandboxed step's allowed request.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("kusaw egress bytes\n", 200))
	}))
	defer up.Close()
	_, upPort, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	egressStep := `    run: [sh, -c, "echo no sandbox here"]`
	if sandboxWorks(t) {
		need(t, "curl")
		egressStep = fmt.Sprintf(`    run: [sh, -c, "unset NO_PROXY no_proxy; curl -fsS -o /dev/null http://localhost:%s/ && curl -fsS -o /dev/null http://localhost:%s/again && ! curl -fs -o /dev/null http://blocked.invalid/"]
    sandbox:
      mode: required
      network: allowlist
      egress:
        allow: ["localhost:%s"]`, upPort, upPort, upPort)
	}
	yaml := `version: 1
repos:
  app:
    path: app
serve:
  max_parallel: 2
  listen: 127.0.0.1:0
pipelines:
  default: [plan, build, fetch]
steps:
  plan:
    run: [sh, -c, "echo planning; sleep 3; echo plan > PLAN.md; : '<img src=x onerror=document.body.dataset.pwned=1>' "]
  build:
    attempts: 2
    run: [sh, -c, "if [ -e $KUSAW_ARTIFACTS/../../1/artifacts/tried ]; then echo built; else touch $KUSAW_ARTIFACTS/tried; echo flaky >&2; sleep 1; exit 1; fi"]
  fetch:
` + egressStep + "\n"
	dir := factoryDir(t, yaml, "app")
	token := "browser-test-token-0123456789"
	set := exec.Command(kusawBin, "config", "set", serve.TokenSecretKey, "--secret")
	set.Dir, set.Env, set.Stdin = dir, testEnv(t, dir), strings.NewReader(token)
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("storing the token: %v\n%s", err, out)
	}
	sp := startServe(t, dir)
	var info client.ServeInfo
	b, err := os.ReadFile(filepath.Join(dir, ".kusaw", record.ServeInfoFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Listen == "" {
		t.Fatalf("serve.json: %v %s", err, b)
	}
	base := "http://" + info.Listen

	c := startChromium(t, bin)
	if err := c.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1100, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		t.Fatal(err)
	}
	// The entry with the token sets the cookie; then the run's page.
	if err := c.call("Page.navigate", map[string]any{"url": base + "/?token=" + token}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the empty runs list", 20*time.Second, func() bool {
		v, _ := c.eval(`document.body.dataset.page === "runs" && document.getElementById("app").textContent.includes("No runs yet")`)
		return v == true
	})
	// The run starts once the browser is ready, so the page sees it run.
	rec, err := sp.client.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run in the runs list", 20*time.Second, func() bool {
		v, _ := c.eval(`document.querySelectorAll("#runs tbody tr").length`)
		n, _ := v.(float64)
		return n >= 1
	})
	if err := c.call("Page.navigate", map[string]any{"url": base + "/#/runs/" + rec.ID}, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	final := ""
	deadline := time.Now().Add(90 * time.Second)
	for final == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the page did not show the run's end; states seen: %v", seen)
		}
		v, err := c.eval(`document.body.dataset.page === "run" ? (document.body.dataset.state || "") : ""`)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := v.(string)
		if st != "" {
			seen[st] = true
		}
		switch st {
		case "succeeded", "failed", "canceled", "interrupted":
			final = st
		}
		time.Sleep(100 * time.Millisecond)
	}
	if final != "succeeded" || !seen["running"] {
		t.Fatalf("the page showed %v, want running then succeeded", seen)
	}
	// Let the last events and the egress chart draw.
	waitFor(t, "the live events to reach run.finished", 10*time.Second, func() bool {
		v, _ := c.eval(`document.getElementById("events").textContent.includes("run.finished")`)
		return v == true
	})
	// Text from runs (here a step's argv in its events) is shown, never
	// run as markup.
	if v, _ := c.eval(`document.body.dataset.pwned === undefined && document.getElementById("events").textContent.includes("<img src=x onerror=")`); v != true {
		t.Errorf("markup from a run's events was not shown as text")
	}
	check := func(what, expr string, want float64) {
		t.Helper()
		v, err := c.eval(expr)
		n, _ := v.(float64)
		if err != nil || n < want {
			t.Errorf("%s: %v (%v), want at least %v", what, v, err, want)
		}
	}
	check("timeline rows", `document.querySelectorAll("#timeline .tl-row").length`, 3)
	check("timeline bars (plan, build twice, fetch)", `document.querySelectorAll("#timeline .tl-bar").length`, 4)
	check("failed build attempt on the timeline", `document.querySelectorAll("#timeline .tl-bar.s-failed").length`, 1)
	check("attempt rows", `document.querySelectorAll("#attempts tbody tr").length`, 4)
	check("attempt reasons", `[...document.querySelectorAll("#attempts td")].filter(td => td.textContent === "step.exit_nonzero").length`, 1)
	check("live events", `document.querySelectorAll("#events div").length`, 10)
	if sandboxWorks(t) {
		waitFor(t, "the egress chart", 10*time.Second, func() bool {
			v, _ := c.eval(`document.querySelectorAll("#egress .chart .host").length`)
			n, _ := v.(float64)
			return n >= 1
		})
		// The same numbers from the API the page reads.
		rep, err := sp.client.Egress(context.Background(), rec.ID, "fetch", 1)
		if err != nil || rep.Source != "summary" {
			t.Fatalf("egress API: %+v %v", rep, err)
		}
		hosts := map[string]record.HostEgress{}
		for _, h := range rep.Hosts {
			hosts[h.Host] = h
		}
		if h := hosts["localhost"]; h.Connections != 2 || h.BytesDown < 7000 || hosts["blocked.invalid"].Refusals != 1 {
			t.Fatalf("egress API hosts: %+v", rep.Hosts)
		}
		v, _ := c.eval(`document.getElementById("egress").textContent`)
		text, _ := v.(string)
		if !strings.Contains(text, "localhost") || !strings.Contains(text, "2 allowed") {
			t.Errorf("egress chart: %q", text)
		}
	}
	screenshot(t, c, "run-page.png")
	// The list of runs, with the run's state and duration.
	if err := c.call("Page.navigate", map[string]any{"url": base + "/#/"}, nil); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		v, _ := c.eval(`document.body.dataset.page === "runs" && document.querySelector("#runs tbody tr .s-succeeded") !== null`)
		if v == true {
			break
		}
		if time.Now().After(deadline) {
			// Say what the page shows, for the next reader of a failure.
			page, _ := c.eval(`document.body.dataset.page + " | " + location.hash + " | " + document.getElementById("app").innerText.slice(0, 600) + " | errors: " + JSON.stringify(window.__errors || [])`)
			t.Fatalf("timed out waiting for the runs list with the finished run; the page shows: %v", page)
		}
		time.Sleep(50 * time.Millisecond)
	}
	screenshot(t, c, "runs-list.png")
	// Without the token the TCP listener answers 401 with a JSON error.
	resp, err := http.Get(base + "/v1/runs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("GET /v1/runs without a token: %d", resp.StatusCode)
	}
}

// screenshot saves the page as name in the test's artifact directory (and
// in $KUSAW_SCREENSHOT_DIR when set).
func screenshot(t *testing.T, c *cdp, name string) {
	t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	if err := c.call("Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil || len(png) < 1000 {
		t.Fatalf("screenshot: %d bytes, %v", len(png), err)
	}
	out := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
	if d := os.Getenv("KUSAW_SCREENSHOT_DIR"); d != "" {
		_ = os.MkdirAll(d, 0o755)
		_ = os.WriteFile(filepath.Join(d, name), png, 0o644)
	}
}
