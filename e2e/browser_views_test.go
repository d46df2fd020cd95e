package e2e

import (
	"context"
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
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/serve/client"
)

// Payloads a hostile run puts in its events, output, file names and
// artifact names. Run as markup, either would set a flag on the page.
const (
	payloadImg    = `<img src=x onerror=document.body.dataset.pwned=1;window.__pwned=1>`
	payloadScript = `<script>document.body.dataset.pwned=2;window.__pwned=2</script>`
)

// viewsPage is a serve with three finished runs (work, hostile, broken)
// and a browser on its page.
type viewsPage struct {
	c                  *cdp
	base               string
	sp                 *serveProc
	work, evil, broken string
	sandboxed          bool
}

// js evaluates expr in the page.
func (p *viewsPage) js(t *testing.T, expr string) any {
	t.Helper()
	v, err := p.c.eval(expr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// until waits for expr to be true in the page, and says what the page
// shows when it is not.
func (p *viewsPage) until(t *testing.T, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if v, _ := p.c.eval(expr); v == true {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	text, _ := p.c.eval(`document.getElementById("app").innerText.slice(0, 3000)`)
	errs, _ := p.c.eval(`JSON.stringify(window.__errors || [])`)
	t.Fatalf("the page never showed %s (%s); script errors %v; it shows:\n%v", what, expr, errs, text)
}

// open shows a view. The page is emptied first, so nothing left of the
// previous view can satisfy the next wait.
func (p *viewsPage) open(t *testing.T, hash string) {
	t.Helper()
	cur, _ := p.c.eval(`(() => { const a = document.getElementById("app"); if (a) a.replaceChildren();
		delete document.body.dataset.state; document.body.dataset.page = "loading"; return location.hash })()`)
	if cur == hash && strings.HasPrefix(hash, "#") {
		// The same address: no navigation happens, so route again.
		p.js(t, `(() => { window.dispatchEvent(new HashChangeEvent("hashchange")); return 1 })()`)
		return
	}
	if err := p.c.call("Page.navigate", map[string]any{"url": p.base + "/" + hash}, nil); err != nil {
		t.Fatal(err)
	}
}

// notPwned checks that no payload ran and none became an element.
func (p *viewsPage) notPwned(t *testing.T) {
	t.Helper()
	if v := p.js(t, `document.body.dataset.pwned === undefined && window.__pwned === undefined && document.querySelectorAll("#app img, #app script").length === 0`); v != true {
		t.Fatalf("markup from a run's records ran or became an element (pwned=%v)", p.js(t, `document.body.dataset.pwned + "/" + window.__pwned`))
	}
}

// TestBrowserViews shows what runs did in headless Chromium, one subtest
// per view: the output followed live, the diff, the transcript, the
// artifacts, the egress decisions, a hostile run's markup shown as text,
// and the runs list's filters. A screenshot of each is kept in the
// test's artifact directory.
func TestBrowserViews(t *testing.T) {
	need(t, "git")
	bin := needChromium(t)
	fk := buildFakes(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("egress bytes\n", 300))
	}))
	defer up.Close()
	_, upPort, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	p := &viewsPage{sandboxed: sandboxWorks(t)}
	fetchStep := `    run: [sh, -c, "echo no sandbox here"]`
	if p.sandboxed {
		need(t, "curl")
		fetchStep = fmt.Sprintf(`    run: [sh, -c, "unset NO_PROXY no_proxy; curl -fsS -o /dev/null http://localhost:%s/ && ! curl -fs -o /dev/null http://blocked.invalid/"]
    sandbox:
      mode: required
      network: allowlist
      egress:
        allow: ["localhost:%s"]`, upPort, upPort)
	}
	// A request whose host holds markup: the proxy refuses it and logs
	// the host as far as it read it ("x<img").
	evilNet := `    run: [sh, -c, "echo no sandbox here"]`
	if p.sandboxed {
		evilNet = `    run: [sh, -c, "curl -s -o /dev/null -x \"$HTTP_PROXY\" --request-target 'http://x<img/src=x/onerror=document.body.dataset.pwned=3>.invalid/' http://a.invalid/; true"]
    sandbox:
      mode: required
      network: allowlist
      egress:
        allow: ["example.com"]`
	}
	marker := filepath.Join(t.TempDir(), "go-on")
	yaml := `version: 1
repos:
  app: {path: ./app}
  lib: {path: ./lib}
providers:
  claude-code: {command: ` + fk.Claude + `}
serve:
  max_parallel: 1
  listen: 127.0.0.1:0
pipelines:
  work:
    steps: [agent, build, fetch]
    deliver:
      repo: app
      merge: {into: main}
  hostile:
    steps: [evil_agent, evil_cmd, evil_net]
    deliver:
      repo: app
      push: {remote: nowhere}
  broken: [split, flood, fail]
steps:
  agent:
    prompt: Write the notes file.
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: notes.md
      FAKE_AGENT_CONTENT: the notes
      FAKE_AGENT_TEXT: I wrote notes.md for you.
  build:
    run: [sh, -c, "echo line one; echo err one >&2; i=0; while [ ! -e '` + marker + `' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo line two; echo more >> README; seq 1 3000 > big.txt; echo report > $KUSAW_ARTIFACTS/report.txt; mkdir $KUSAW_ARTIFACTS/sub; echo '{}' > $KUSAW_ARTIFACTS/sub/data.json"]
  fetch:
` + fetchStep + `
  evil_agent:
    prompt: "` + strings.ReplaceAll(payloadScript, `"`, `\"`) + ` write it"
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: "` + payloadImg + `.md"
      FAKE_AGENT_CONTENT: "` + payloadScript + `"
      FAKE_AGENT_TEXT: "` + payloadImg + payloadScript + `"
  evil_cmd:
    env:
      P1: "` + payloadImg + `"
      P2: "` + payloadScript + `"
    run: [sh, -c, 'echo "$P1 $P2"; echo "$P2" >&2; echo "$P2" > "$P1.txt"; echo "$P2" > "$KUSAW_ARTIFACTS/$P1.html"']
  split:
    per_repo: true
    repos: [app, lib]
    run: [sh, -c, "echo in $(basename $PWD); echo err $(basename $PWD) >&2"]
  flood:
    run: [sh, -c, "yes 'flood line' | head -c 12000000; echo; echo the last line"]
  fail:
    run: [sh, -c, "exit 3"]
  evil_net:
` + evilNet + `
`
	dir := factoryDir(t, yaml, "app", "lib")
	if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("agent.token", "fake-oauth-token-1234"); err != nil {
		t.Fatal(err)
	}
	token := "browser-views-token-0123456789"
	set := exec.Command(kusawBin, "config", "set", serve.TokenSecretKey, "--secret")
	set.Dir, set.Env, set.Stdin = dir, testEnv(t, dir), strings.NewReader(token)
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("storing the token: %v\n%s", err, out)
	}
	p.sp = startServe(t, dir)
	var info client.ServeInfo
	b, err := os.ReadFile(filepath.Join(dir, ".kusaw", record.ServeInfoFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Listen == "" {
		t.Fatalf("serve.json: %v %s", err, b)
	}
	p.base = "http://" + info.Listen
	p.c = startChromium(t, bin)
	if err := p.c.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1400, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		t.Fatal(err)
	}
	// Script errors are kept for the failure messages.
	if err := p.c.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `window.__errors = [];
		addEventListener("error", e => __errors.push(String(e.message)));
		addEventListener("unhandledrejection", e => __errors.push(String(e.reason && e.reason.stack || e.reason)));`}, nil); err != nil {
		t.Fatal(err)
	}
	p.open(t, "?token="+token)
	p.until(t, "the runs list", `document.body.dataset.page === "runs"`)
	ctx := context.Background()
	submit := func(pipeline string) string {
		rec, err := p.sp.client.Submit(ctx, pipeline, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rec.ID
	}
	p.work = submit("work")

	// The output view follows stdout and stderr while the step runs: the
	// step waits for the marker, and what it prints after shows up on the
	// open page.
	t.Run("output", func(t *testing.T) {
		p.open(t, "#/runs/"+p.work+"/build/1/output")
		p.until(t, "the first lines while the build runs", `document.getElementById("output-stdout") !== null && document.getElementById("output-stdout").textContent.includes("line one") && document.getElementById("output-stderr").textContent.includes("err one")`)
		// The page learns the run's state from its events, which may come
		// after the first output under load: wait for it, then check that
		// the step still waits (line two not printed).
		p.until(t, "the page to show the run running", `document.body.dataset.state === "running"`)
		if v := p.js(t, `String(document.getElementById("output-stdout").textContent.includes("line two"))`); v != "false" {
			t.Fatalf("line two printed before the marker was written: %v", v)
		}
		// The diff so far: the agent's commit, not yet the build's.
		p.until(t, "the diff of the run so far", `[...document.querySelectorAll("#diff .path")].map(e => e.textContent).join(",") === "notes.md"`)
		writeFile(t, marker, "")
		p.until(t, "the line printed after the page opened", `document.getElementById("output-stdout").textContent.includes("line two")`)
		// The diff follows the run branch as it moves, on the same page.
		p.until(t, "the build's files in the diff", `document.querySelectorAll("#diff .diff-file").length === 3`)
		if v := p.js(t, `document.getElementById("output-stdout").textContent`); v != "line one\nline two\n" {
			t.Errorf("stdout shown as %q", v)
		}
		screenshot(t, p.c, "view-output.png")
	})
	writeFile(t, marker, "") // when the output subtest did not run
	if d := waitDetail(t, p.sp.client, p.work, 90*time.Second); d.Run.State != "succeeded" {
		t.Fatalf("the work run %s: %s %s", p.work, d.Run.State, d.Run.Message)
	}
	p.evil = submit("hostile")
	p.broken = submit("broken")
	if d := waitDetail(t, p.sp.client, p.evil, 90*time.Second); d.Run.State != "succeeded" {
		t.Fatalf("the hostile run %s: %s %s", p.evil, d.Run.State, d.Run.Message)
	}
	waitDetail(t, p.sp.client, p.broken, 60*time.Second)

	t.Run("output per repo", func(t *testing.T) {
		p.open(t, "#/runs/"+p.broken+"/split/1/output")
		p.until(t, "one stdout and stderr per repo", `document.querySelectorAll("#output pre.output").length === 4 && document.getElementById("output-stderr-1").textContent.length > 0`)
		if v := p.js(t, `[...document.querySelectorAll("#output pre.output")].map(e => e.id + "=" + e.textContent.trim()).join(",")`); v != "output-stdout=in app,output-stderr=err app,output-stdout-1=in lib,output-stderr-1=err lib" {
			t.Errorf("per-repo output: %v", v)
		}
	})

	// A long log is read from its end: the page never downloads it whole.
	t.Run("output tail", func(t *testing.T) {
		p.open(t, "#/runs/"+p.broken+"/flood/1/output")
		p.until(t, "the end of a 12 MB stdout", `document.getElementById("output-stdout") !== null && document.getElementById("output-stdout").textContent.endsWith("the last line\n")`)
		if v := p.js(t, `document.getElementById("output-stdout").textContent.length <= (1 << 20) && document.getElementById("output").textContent.includes("Earlier output is not shown here")`); v != true {
			t.Errorf("the tail of a long stdout: %v", p.js(t, `document.getElementById("output-stdout").textContent.length`))
		}
		got := p.js(t, `performance.getEntriesByType("resource").filter(e => e.name.includes("/log?") && e.name.includes("flood")).reduce((n, e) => n + e.encodedBodySize, 0)`)
		if n, _ := got.(float64); n > 6<<20 {
			t.Errorf("the page read %v bytes of a 12 MB log", got)
		}
	})
	t.Run("diff", func(t *testing.T) {
		p.open(t, "#/runs/"+p.work)
		p.until(t, "the app repo's diff", `document.querySelector('#diff .diff-repo[data-repo="app"]') !== null && document.body.dataset.state === "succeeded"`)
		files := p.js(t, `[...document.querySelectorAll("#diff .diff-file")].map(d => d.querySelector(".st").textContent + " " + d.querySelector(".path").textContent + " " + (d.open ? "open" : "closed")).sort().join("|")`)
		if files != "added big.txt closed|added notes.md open|modified README open" {
			t.Fatalf("diff files: %v", files)
		}
		// Added and removed lines are coloured apart; the collapsed file
		// draws its lines when opened.
		if v := p.js(t, `(() => { const f = [...document.querySelectorAll("#diff .diff-file")].find(d => d.querySelector(".path").textContent === "README");
			const add = [...f.querySelectorAll(".patch .add")].map(x => x.textContent);
			return add.join(",") + "|" + getComputedStyle(f.querySelector(".patch .add")).backgroundColor + "|" + f.querySelectorAll(".patch .hunk").length })()`); v != "+more|rgb(230, 255, 237)|1" {
			t.Errorf("README's patch: %v", v)
		}
		p.js(t, `(() => { const f = [...document.querySelectorAll("#diff .diff-file")].find(d => d.querySelector(".path").textContent === "big.txt"); f.open = true; return 1 })()`)
		p.until(t, "the big file's lines once opened", `[...document.querySelectorAll("#diff .diff-file")].find(d => d.querySelector(".path").textContent === "big.txt").querySelectorAll(".patch .add").length === 3000`)
		if v := p.js(t, `document.querySelector("#diff .diff-head").textContent`); !strings.Contains(fmt.Sprint(v), "3 files, +3002 −0") {
			t.Errorf("diff head: %v", v)
		}
		screenshot(t, p.c, "view-diff.png")
	})

	t.Run("transcript", func(t *testing.T) {
		p.open(t, "#/runs/"+p.work+"/agent/1/transcript")
		p.until(t, "the agent's transcript", `document.querySelector("#transcript .tr-result") !== null`)
		text := fmt.Sprint(p.js(t, `document.getElementById("transcript").textContent`))
		for _, want := range []string{"Write the notes file.", "I wrote notes.md for you.", "Write", "notes.md", "File created successfully", "result: success", "cost $0.0"} {
			if !strings.Contains(text, want) {
				t.Errorf("the transcript lacks %q:\n%s", want, text)
			}
		}
		if v := p.js(t, `document.querySelectorAll("#transcript .tr-tool.t-ok").length + "/" + document.querySelector("#transcript .tr-tool .tool-name").textContent`); v != "1/Write" {
			t.Errorf("tool calls: %v", v)
		}
		// The order: prompt, then what the agent did, the result last.
		if v := p.js(t, `[...document.querySelectorAll("#transcript > .tr")].map(e => e.className.split(" ")[1]).join(",")`); !strings.HasPrefix(fmt.Sprint(v), "tr-prompt,tr-probe,tr-init,") || !strings.HasSuffix(fmt.Sprint(v), "tr-result") || !strings.Contains(fmt.Sprint(v), "tr-tool") {
			t.Errorf("transcript order: %v", v)
		}
		// Cost and tokens per attempt, step and run, as the records say.
		d, err := p.sp.client.Detail(context.Background(), p.work)
		if err != nil || d.Run.Usage == nil || d.Run.Usage.CostUSD == nil || len(d.Attempts) == 0 || d.Attempts[0].Usage == nil {
			t.Fatalf("the work run's usage: %+v %v", d, err)
		}
		cost := fmt.Sprintf("$%.4f", *d.Run.Usage.CostUSD)
		p.until(t, "the usage columns", `document.getElementById("run-usage") !== null`)
		if v := p.js(t, `[...document.querySelectorAll("#attempts tbody tr")][0].lastChild.textContent + "|" + [...document.querySelectorAll("#steps tbody tr")][0].lastChild.textContent + "|" + document.getElementById("run-usage").textContent`); v != cost+"|"+cost+"|usage "+fmt.Sprint(d.Run.Usage.Tokens())+" tokens · "+cost+" · "+fmt.Sprint(d.Run.Usage.Turns)+" turns" {
			t.Errorf("usage shown: %v (cost %s, %d tokens)", v, cost, d.Run.Usage.Tokens())
		}
		screenshot(t, p.c, "view-transcript.png")
	})

	t.Run("artifacts", func(t *testing.T) {
		p.open(t, "#/runs/"+p.work+"/build/1/artifacts")
		p.until(t, "the artifact links", `document.querySelectorAll("#artifacts a").length === 2`)
		if v := p.js(t, `[...document.querySelectorAll("#artifacts a")].map(a => a.textContent).join(",")`); v != "report.txt,sub/data.json" {
			t.Fatalf("artifacts: %v", v)
		}
		if v := p.js(t, `document.getElementById("attempt-panel").textContent`); strings.Contains(fmt.Sprint(v), "null") || strings.Contains(fmt.Sprint(v), "undefined") {
			t.Errorf("the artifacts view shows %q", v)
		}
		// The link downloads the file, as an attachment.
		if v := p.js(t, `(async () => { const a = document.querySelector("#artifacts a"); const r = await fetch(a.href);
			return r.status + "|" + r.headers.get("content-disposition") + "|" + r.headers.get("content-type") + "|" + await r.text() })()`); v != `200|attachment; filename=report.txt|application/octet-stream|report`+"\n" {
			t.Errorf("download: %q", v)
		}
		screenshot(t, p.c, "view-artifacts.png")
	})

	t.Run("egress", func(t *testing.T) {
		if !p.sandboxed {
			msg := "the sandbox does not work here, so no step has an allowlist and an egress.log (see kusaw sandbox check)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		p.open(t, "#/runs/"+p.work+"/fetch/1/egress")
		p.until(t, "the egress decisions", `document.querySelectorAll("#egress-log tbody tr").length >= 2`)
		rows := fmt.Sprint(p.js(t, `[...document.querySelectorAll("#egress-log tbody tr")].map(tr => [...tr.children].slice(2, 7).map(td => td.textContent).join(" ")).join("|")`))
		if !strings.Contains(rows, "localhost "+upPort+" allow") || !strings.Contains(rows, "blocked.invalid 80 refuse host.not_allowed") {
			t.Fatalf("egress rows: %s", rows)
		}
		if v := p.js(t, `document.querySelector("#egress-log p").textContent`); !strings.Contains(fmt.Sprint(v), "1 refused") {
			t.Errorf("egress summary: %v", v)
		}
		if v := p.js(t, `document.getElementById("attempt-panel").textContent`); strings.Contains(fmt.Sprint(v), "null") || strings.Contains(fmt.Sprint(v), "undefined") {
			t.Errorf("the egress view shows %q", v)
		}
		screenshot(t, p.c, "view-egress.png")
	})

	// A run whose events, output, file names and artifact names hold
	// markup: every view shows it as text and nothing runs.
	t.Run("hostile", func(t *testing.T) {
		p.open(t, "#/runs/"+p.evil)
		p.until(t, "the hostile run's diff", `document.querySelectorAll("#diff .diff-file").length === 2 && document.body.dataset.state === "succeeded"`)
		p.until(t, "the live events", `document.getElementById("events").textContent.includes("run.finished")`)
		p.notPwned(t)
		if v := p.js(t, `[...document.querySelectorAll("#diff .path")].map(e => e.textContent).sort().join("|")`); v != payloadImg+".md|"+payloadImg+".txt" {
			t.Errorf("hostile file names: %v", v)
		}
		if v := p.js(t, `document.getElementById("diff").textContent.includes(`+jsString("+"+payloadScript)+`)`); v != true {
			t.Errorf("the hostile patch is not shown as text")
		}
		views := map[string]string{
			"#/runs/" + p.evil + "/evil_agent/1/transcript": `document.querySelector("#transcript .tr-result") !== null`,
			"#/runs/" + p.evil + "/evil_cmd/1/output":       `document.getElementById("output-stderr") !== null && document.getElementById("output-stderr").textContent.length > 0`,
			"#/runs/" + p.evil + "/evil_cmd/1/artifacts":    `document.querySelectorAll("#artifacts a").length === 1`,
		}
		for hash, ready := range views {
			p.open(t, hash)
			p.until(t, hash, ready)
			p.notPwned(t)
		}
		p.open(t, "#/runs/"+p.evil+"/evil_agent/1/transcript")
		p.until(t, "the hostile transcript", `document.querySelector("#transcript .tr-result") !== null`)
		text := fmt.Sprint(p.js(t, `document.getElementById("transcript").textContent`))
		for _, want := range []string{payloadScript + " write it", payloadImg + payloadScript, payloadImg + ".md"} {
			if !strings.Contains(text, want) {
				t.Errorf("the transcript does not show %q literally:\n%s", want, text)
			}
		}
		p.notPwned(t)
		p.open(t, "#/runs/"+p.evil+"/evil_cmd/1/output")
		p.until(t, "the hostile output", `document.getElementById("output-stdout") !== null && document.getElementById("output-stdout").textContent.length > 0`)
		if v := p.js(t, `document.getElementById("output-stdout").textContent + document.getElementById("output-stderr").textContent`); v != payloadImg+" "+payloadScript+"\n"+payloadScript+"\n" {
			t.Errorf("hostile output shown as %q", v)
		}
		p.open(t, "#/runs/"+p.evil+"/evil_cmd/1/artifacts")
		p.until(t, "the hostile artifact", `document.querySelectorAll("#artifacts a").length === 1`)
		if v := p.js(t, `document.querySelector("#artifacts a").textContent + "|" + document.querySelector("#artifacts a").getAttribute("download")`); v != payloadImg+".html|"+payloadImg+".html" {
			t.Errorf("hostile artifact link: %v", v)
		}
		// Its download is an attachment of type octet-stream, never a page.
		if v := p.js(t, `(async () => { const r = await fetch(document.querySelector("#artifacts a").href); return r.status + "|" + r.headers.get("content-type") + "|" + r.headers.get("content-disposition").startsWith("attachment") + "|" + r.headers.get("content-security-policy") })()`); v != "200|application/octet-stream|true|default-src 'none'; sandbox" {
			t.Errorf("hostile artifact download: %v", v)
		}
		p.notPwned(t)
		if p.sandboxed {
			p.open(t, "#/runs/"+p.evil+"/evil_net/1/egress")
			p.until(t, "the hostile egress decision", `document.querySelectorAll("#egress-log tbody tr").length === 1`)
			if v := p.js(t, `[...document.querySelector("#egress-log tbody tr").children].map(td => td.textContent).slice(2).join("|")`); !strings.HasPrefix(fmt.Sprint(v), "x<img|80|refuse|host.invalid|") || !strings.Contains(fmt.Sprint(v), `"x<img" is not a valid host name`) {
				t.Errorf("hostile egress row: %v", v)
			}
			p.notPwned(t)
		}
		screenshot(t, p.c, "view-hostile.png")
	})

	// Where delivery took a run's work, or why it could not.
	t.Run("delivery", func(t *testing.T) {
		var good, bad *record.Delivery
		waitFor(t, "both deliveries recorded", 30*time.Second, func() bool {
			g, err1 := p.sp.client.Detail(ctx, p.work)
			b, err2 := p.sp.client.Detail(ctx, p.evil)
			if err1 != nil || err2 != nil {
				return false
			}
			good, bad = g.Run.Delivery, b.Run.Delivery
			return good != nil && bad != nil
		})
		if good.State != record.DeliveryDone || bad.State != record.DeliveryFailed {
			t.Fatalf("deliveries: %+v %+v", good, bad)
		}
		p.open(t, "#/runs/"+p.work)
		p.until(t, "the delivery", `document.getElementById("delivery") !== null`)
		if v := p.js(t, `document.getElementById("delivery").textContent`); v != "delivery delivered (app): merged into main at "+good.Merged[:10] {
			t.Errorf("delivery shown as %q", v)
		}
		p.open(t, "#/runs/"+p.evil)
		p.until(t, "the failed delivery", `document.getElementById("delivery") !== null`)
		v := fmt.Sprint(p.js(t, `document.getElementById("delivery").className + "|" + document.getElementById("delivery").textContent`))
		if !strings.HasPrefix(v, "reason|delivery failed (app)") || !strings.Contains(v, "failed at push") || !strings.Contains(v, "fix: ") {
			t.Errorf("failed delivery shown as %q (%+v)", v, bad)
		}
		p.notPwned(t)
		screenshot(t, p.c, "view-delivery.png")
	})

	t.Run("filters", func(t *testing.T) {
		p.open(t, "#/")
		p.until(t, "all three runs", `document.querySelectorAll("#runs tbody tr").length === 3`)
		rowsOf := func() string {
			return fmt.Sprint(p.js(t, `[...document.querySelectorAll("#runs tbody tr")].map(tr => tr.children[1].textContent + ":" + tr.children[2].textContent).sort().join(",")`))
		}
		// Choosing in the menus filters the list and keeps the choice in
		// the address.
		p.js(t, `(() => { const s = document.getElementById("filter-pipeline"); s.value = "hostile"; s.dispatchEvent(new Event("change")); return 1 })()`)
		p.until(t, "the hostile pipeline only", `location.hash === "#/?pipeline=hostile" && document.querySelectorAll("#runs tbody tr").length === 1`)
		if r := rowsOf(); r != "hostile:succeeded" {
			t.Errorf("pipeline filter: %s", r)
		}
		p.open(t, "#/?state=failed")
		p.until(t, "the failed runs only", `document.querySelectorAll("#runs tbody tr").length === 1 && document.getElementById("filter-state").value === "failed"`)
		if r := rowsOf(); r != "broken:failed" {
			t.Errorf("state filter: %s", r)
		}
		p.js(t, `(() => { const s = document.getElementById("filter-pipeline"); s.value = "work"; s.dispatchEvent(new Event("change")); return 1 })()`)
		p.until(t, "no run for both filters", `location.hash === "#/?pipeline=work&state=failed" && document.getElementById("app").textContent.includes("No runs match the filter.")`)
		p.open(t, "#/?pipeline=work")
		p.until(t, "the work run", `document.querySelectorAll("#runs tbody tr").length === 1`)
		if r := rowsOf(); r != "work:succeeded" {
			t.Errorf("pipeline filter: %s", r)
		}
		screenshot(t, p.c, "view-filters.png")
	})
	// sandbox exec's and doctor's runs are left out of the list unless
	// asked; the list says how many and links to them.
	t.Run("sandbox runs apart", func(t *testing.T) {
		id := "20200101-000000-5a5a"
		now := time.Now().UTC().Format(time.RFC3339)
		writeFile(t, filepath.Join(dir, ".kusaw", "runs", id, "run.json"),
			`{"id":"`+id+`","pipeline":"(sandbox exec)","state":"succeeded","created":"`+now+`","started":"`+now+`","finished":"`+now+`","repos":[],"steps":[{"id":"_exec","outcome":"passed","attempts":1}]}`)
		p.open(t, "#/")
		p.until(t, "the note on the hidden sandbox run", `document.querySelectorAll("#runs tbody tr").length === 3 && (document.getElementById("sandbox-hidden") || {}).textContent === "1 sandbox exec/doctor run not shown: show them"`)
		p.js(t, `(() => { document.querySelector("#sandbox-hidden a").click(); return 1 })()`)
		p.until(t, "the sandbox run listed", `location.hash === "#/?sandbox=1" && document.querySelectorAll("#runs tbody tr").length === 4 && document.getElementById("runs").textContent.includes("(sandbox exec)")`)
		screenshot(t, p.c, "view-sandbox-runs.png")
	})
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
