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
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// shapesYAML is a pipeline whose shapes run a helper each: a fixer after
// check's failed first attempt, a judge of try's candidates, a resolve of
// the parallel group's conflicted merge. fixer is the fixer's sandbox and
// what it runs, top more of the factory's settings.
func shapesYAML(top, fixer string) string {
	return `version: 1
repos:
  app: {path: ./app}
` + top + `pipelines:
  default: [check, try, [one, two]]
steps:
  check:
    attempts: 2
    on_failure: fixer
    run: [sh, -c, "test -f fixed.txt || { echo missing fixed.txt; exit 1; }"]
  fixer:
` + fixer + `
  try:
    candidates: 2
    select: judge:pick
    run: [sh, -c, "echo $KUSAW_CANDIDATE > pick.txt"]
  pick:
    run: [sh, -c, "echo judging; echo 2 > $KUSAW_ARTIFACTS/choice"]
  one: {run: [sh, -c, "echo one > README"], resolve: merger}
  two: {run: [sh, -c, "echo two > README"]}
  merger: {run: [sh, -c, "echo resolving; echo both > README"]}
`
}

const (
	fixerLabel   = "fixer for step check after its attempt 1"
	judgeLabel   = "judge of step try's candidates"
	resolveLabel = "resolve of group 1 (step two's merge in repo app)"
)

// TestShapeHelpersShown: the attempts a fix loop, a judge and a resolve
// ran are in kusaw show (text and --json, each labelled by its role, in
// the order they ran), in kusaw logs, in egress suggest, and kusaw log
// verify checks their events and egress logs, and refuses an edited one.
// The run's outcome and exit code stay the pipeline's steps'.
func TestShapeHelpersShown(t *testing.T) {
	needSandbox(t)
	need(t, "curl")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fixer's fetch") }))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	// The fixer runs sandboxed in audit mode: the host it reaches (a
	// name the stub DNS points at the test's loopback server) is admitted
	// and logged would_refuse in its own egress.log.
	dns := newStubDNS(t)
	dns.set("helper.test", "127.0.0.1")
	dir := factoryDir(t, shapesYAML(`sandbox:
  egress:
    resolver: "`+dns.addr+`"
    allow_ranges: [127.0.0.0/8]
`, `    sandbox: {mode: required, network: audit}
    run: [sh, -c, "echo fixing; curl -sf --noproxy '' -x \"$HTTP_PROXY\" http://helper.test:`+port+`/ >/dev/null && echo yes > fixed.txt"]`), "app")
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("kusaw run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)

	show := runKusaw(t, dir, "show", id)
	if show.code != 0 {
		t.Fatalf("show: %d %s", show.code, show.stderr)
	}
	// Each helper right after what it served: the fixer after check's
	// first attempt, the judge after try's candidates, the resolve after
	// the group.
	order := []string{"  attempt 1/2: failed", "  ↳ " + fixerLabel + ": step fixer attempt 1/1: passed", "  attempt 2/2: passed",
		"candidate 2, attempt 2/2: passed", "  ↳ " + judgeLabel + ": step pick attempt 1/1: passed",
		"│ step two: passed", "↳ " + resolveLabel + ": step merger attempt 1/1: passed"}
	at := 0
	for _, want := range order {
		i := strings.Index(show.stdout[at:], want)
		if i < 0 {
			t.Fatalf("kusaw show lacks %q after byte %d:\n%s", want, at, show.stdout)
		}
		at += i + len(want)
	}
	if !strings.Contains(show.stdout, "sandbox required") {
		t.Errorf("the fixer's sandbox is not shown:\n%s", show.stdout)
	}

	js := runKusaw(t, dir, "show", id, "--json")
	var out struct {
		Run      record.RunRecord        `json:"run"`
		Attempts []*record.AttemptRecord `json:"attempts"`
		Helpers  []*record.AttemptRecord `json:"helpers"`
	}
	if err := json.Unmarshal([]byte(js.stdout), &out); err != nil {
		t.Fatalf("show --json: %v\n%s", err, js.stdout)
	}
	if len(out.Attempts) != 6 {
		t.Errorf("show --json attempts: %d, want the pipeline's 6", len(out.Attempts))
	}
	labels := []string{}
	for _, h := range out.Helpers {
		if h.Role == nil {
			t.Fatalf("helper %s %d without a role", h.Step, h.Number)
		}
		labels = append(labels, h.Step+": "+h.Role.Label)
	}
	if got, want := strings.Join(labels, "; "), "fixer: "+fixerLabel+"; pick: "+judgeLabel+"; merger: "+resolveLabel; got != want {
		t.Fatalf("show --json helpers:\n got %s\nwant %s", got, want)
	}
	if c := record.RunExitCode(&out.Run, out.Attempts); c != status.ExitOK {
		t.Errorf("exit code from show --json: %d", c)
	}

	logs := runKusaw(t, dir, "logs", id, "--step", "fixer")
	if logs.code != 0 || !strings.Contains(logs.stdout, "== fixer attempt 1 ("+fixerLabel+") stdout.log ==\nfixing") {
		t.Fatalf("logs --step fixer: %d\n%s%s", logs.code, logs.stdout, logs.stderr)
	}
	all := runKusaw(t, dir, "logs", id)
	// In the order they served: check's first attempt, its fixer, the
	// judge, the resolve (check's second attempt prints nothing).
	ci, fi := strings.Index(all.stdout, "== check attempt 1 stdout.log"), strings.Index(all.stdout, "== fixer attempt 1")
	pi, mi := strings.Index(all.stdout, "== pick attempt 1"), strings.Index(all.stdout, "== merger attempt 1")
	if ci < 0 || fi < ci || pi < fi || mi < pi || !strings.Contains(all.stdout, "== pick attempt 1 ("+judgeLabel+") stdout.log ==\njudging") ||
		!strings.Contains(all.stdout, "== merger attempt 1 ("+resolveLabel+") stdout.log ==\nresolving") {
		t.Fatalf("logs of the run: the helpers are missing or out of place:\n%s", all.stdout)
	}
	if ev := runKusaw(t, dir, "logs", id, "--step", "pick", "--events"); !strings.Contains(ev.stdout, `"role":{"kind":"judge","for":"try"`) {
		t.Errorf("the judge's events lack its role:\n%s%s", ev.stdout, ev.stderr)
	}

	sug := runKusaw(t, dir, "egress", "suggest", id)
	if sug.code != 0 || !strings.Contains(sug.stdout, "  - helper.test:"+port+"  #") {
		t.Errorf("egress suggest lacks the fixer's host: %d\n%s%s", sug.code, sug.stdout, sug.stderr)
	}

	// log verify of the whole run: the helpers' events and the fixer's
	// egress.log are among its logs and verify.
	runDir := filepath.Join(dir, ".kusaw", "runs", id)
	files, _ := filepath.Glob(filepath.Join(runDir, "steps", "*", "*", "*.log"))
	evs, _ := filepath.Glob(filepath.Join(runDir, "steps", "*", "*", "events.jsonl"))
	var logsToVerify []string
	for _, f := range append(files, evs...) {
		if b := filepath.Base(f); b == "events.jsonl" || b == "egress.log" {
			logsToVerify = append(logsToVerify, f)
		}
	}
	logsToVerify = append(logsToVerify, filepath.Join(runDir, "events.jsonl"))
	for _, want := range []string{"steps/fixer/1/events.jsonl", "steps/fixer/1/egress.log", "steps/pick/1/events.jsonl", "steps/merger/1/events.jsonl"} {
		found := false
		for _, f := range logsToVerify {
			found = found || strings.HasSuffix(f, want)
		}
		if !found {
			t.Fatalf("the run has no %s: %v", want, logsToVerify)
		}
	}
	v := runKusaw(t, dir, append([]string{"log", "verify", "--strict"}, logsToVerify...)...)
	if v.code != 0 || !strings.Contains(v.stdout, "steps/pick/1/events.jsonl") {
		t.Fatalf("log verify of the run with its helpers: %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	// An edited helper's log does not verify: the judge's role rewritten.
	judgeEv := filepath.Join(runDir, "steps", "pick", "1", "events.jsonl")
	b := readFile(t, judgeEv)
	edited := strings.Replace(b, `"for":"try"`, `"for":"one"`, 1)
	if edited == b {
		t.Fatalf("the judge's events name no role:\n%s", b)
	}
	if err := os.WriteFile(judgeEv, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := runKusaw(t, dir, "log", "verify", judgeEv); v.code != int(status.ExitVerifyFailed) {
		t.Fatalf("an edited judge's events verified: %d\n%s%s", v.code, v.stdout, v.stderr)
	}
}

// TestBrowserHelpers: the run's page in headless Chromium shows the
// helpers' attempts (fixer, judge, resolve) in the attempts table with
// their roles, after the pipeline's own, and in the timeline, and opens a
// helper's output; the API's run detail lists them apart from the
// pipeline's attempts, whose exit code it keeps.
func TestBrowserHelpers(t *testing.T) {
	need(t, "git")
	bin := needChromium(t)
	dir := factoryDir(t, shapesYAML("serve:\n  listen: 127.0.0.1:0\n", `    run: [sh, -c, "echo fixing; echo yes > fixed.txt"]`), "app")
	token := "browser-helpers-token-0123456789"
	set := exec.Command(kusawBin, "config", "set", serve.TokenSecretKey, "--secret")
	set.Dir, set.Env, set.Stdin = dir, testEnv(t, dir), strings.NewReader(token)
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("storing the token: %v\n%s", err, out)
	}
	p := &viewsPage{sp: startServe(t, dir)}
	var info client.ServeInfo
	b, err := os.ReadFile(filepath.Join(dir, ".kusaw", record.ServeInfoFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Listen == "" {
		t.Fatalf("serve.json: %v %s", err, b)
	}
	p.base = "http://" + info.Listen
	rec, err := p.sp.client.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := waitDetail(t, p.sp.client, rec.ID, 90*time.Second)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("run %s: %s %s", rec.ID, d.Run.State, d.Run.Message)
	}
	// The API: helpers apart, in the order they ran; attempts and the
	// exit code the pipeline's own.
	var labels []string
	for _, h := range d.Helpers {
		if h.Role == nil {
			t.Fatalf("helper %s %d without a role", h.Step, h.Number)
		}
		labels = append(labels, h.Step+": "+h.Role.Label)
	}
	if got, want := strings.Join(labels, "; "), "fixer: "+fixerLabel+"; pick: "+judgeLabel+"; merger: "+resolveLabel; got != want || len(d.Attempts) != 6 || d.ExitCode != status.ExitOK {
		t.Fatalf("run detail: helpers %s (want %s), %d attempts, exit %d", got, want, len(d.Attempts), d.ExitCode)
	}

	p.c = startChromium(t, bin)
	if err := p.c.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1400, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.c.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `window.__errors = [];
		addEventListener("error", e => __errors.push(String(e.message)));
		addEventListener("unhandledrejection", e => __errors.push(String(e.reason && e.reason.stack || e.reason)));`}, nil); err != nil {
		t.Fatal(err)
	}
	p.open(t, "?token="+token)
	p.until(t, "the runs list", `document.body.dataset.page === "runs"`)
	p.open(t, "#/runs/"+rec.ID)
	p.until(t, "the helpers in the attempts table", `document.body.dataset.state === "succeeded" && document.querySelectorAll("#attempts tbody tr.helper").length === 3`)
	rows := fmt.Sprint(p.js(t, `[...document.querySelectorAll("#attempts tbody tr")].map(tr => tr.children[0].textContent + (tr.classList.contains("helper") ? " " + tr.querySelector("td.role").textContent : "")).join("|")`))
	if want := "check|check|try|try|one|two|fixer ↳ " + fixerLabel + "|pick ↳ " + judgeLabel + "|merger ↳ " + resolveLabel; rows != want {
		t.Errorf("attempts table:\n got %s\nwant %s", rows, want)
	}
	if v := p.js(t, `[...document.querySelectorAll("#attempts thead th")].map(th => th.textContent).slice(0, 3).join(",")`); v != "step,role,attempt" {
		t.Errorf("attempts table head: %v", v)
	}
	tl := fmt.Sprint(p.js(t, `[...document.querySelectorAll("#timeline .tl-helper .tl-label")].map(e => e.textContent).join("|")`))
	if want := "↳ " + fixerLabel + ": fixer|↳ " + judgeLabel + ": pick|↳ " + resolveLabel + ": merger"; tl != want {
		t.Errorf("timeline helper rows:\n got %s\nwant %s", tl, want)
	}
	if v := p.js(t, `document.querySelectorAll("#timeline .tl-helper .tl-bar.s-passed").length`); v != float64(3) {
		t.Errorf("helper bars on the timeline: %v", v)
	}
	// A helper's own output, under its role.
	p.open(t, "#/runs/"+rec.ID+"/fixer/1/output")
	p.until(t, "the fixer's output", `document.getElementById("output-stdout") !== null && document.getElementById("output-stdout").textContent.includes("fixing")`)
	if v := fmt.Sprint(p.js(t, `document.querySelector("#attempt-panel h2").textContent`)); !strings.Contains(v, "fixer attempt 1 ("+fixerLabel+")") {
		t.Errorf("the helper's panel heading: %s", v)
	}
	if v := p.js(t, `JSON.stringify(window.__errors || [])`); v != "[]" {
		t.Errorf("script errors: %v", v)
	}
	screenshot(t, p.c, "view-helpers.png")
}
