package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// Gates and notifications end to end: kusaw run in-process and kusaw
// serve, the CLI and the API, a local HTTP server on loopback.

const gatedSteps = `  build: {run: [sh, -c, "echo b > b.txt"]}
  deploy:
    gate: GATE
    run: [sh, -c, "echo d > d.txt"]
`

func gatedFactory(t *testing.T, gate string) string {
	return shapeFactory(t, "  default: [build, deploy]\n", strings.Replace(gatedSteps, "GATE", gate, 1))
}

// waitWaiting waits until the factory's only run waits at its gate.
func waitWaiting(t *testing.T, dir string) string {
	t.Helper()
	var id string
	waitFor(t, "the run to wait at its gate", 30*time.Second, func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
		if len(entries) != 1 {
			return false
		}
		id = entries[0].Name()
		b, _ := os.ReadFile(filepath.Join(dir, ".kusaw", "runs", id, "run.json"))
		return strings.Contains(string(b), `"state": "waiting"`) || strings.Contains(string(b), `"state":"waiting"`)
	})
	return id
}

func gateEvent(t *testing.T, dir, id, typ string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "events.jsonl")), "\n") {
		var ev record.Event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == typ {
			return ev.Data
		}
	}
	t.Fatalf("run %s has no %s event", id, typ)
	return nil
}

func TestGateApprovedThroughCLI(t *testing.T) {
	dir := gatedFactory(t, `"deploy to staging?"`)
	cmd, out, errb := startKusaw(t, dir, "run")
	id := waitWaiting(t, dir)
	waitFor(t, "kusaw run to print the approve command", 10*time.Second, func() bool {
		return strings.Contains(out.String()+errb.String(), "kusaw approve "+id+" deploy")
	})
	if onBranch(dir, id, "d.txt") != "" {
		t.Fatal("the gated step ran before the approval")
	}
	res := runKusaw(t, dir, "approve", id)
	if res.code != 0 || !strings.Contains(res.stdout, "approved the gate before step deploy") {
		t.Fatalf("kusaw approve: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kusaw run after the approval: %v\n%s%s", err, out.String(), errb.String())
	}
	if onBranch(dir, id, "d.txt") != "d" {
		t.Fatal("the approved step's work is not on the run branch")
	}
	ev := gateEvent(t, dir, id, record.EvGateApproved)
	if ev["by"] == "" || ev["at"] == nil {
		t.Fatalf("gate.approved lacks who or when: %v", ev)
	}
	// A second decision on an ended run is refused.
	if res := runKusaw(t, dir, "reject", id, "--reason", "late"); res.code == 0 {
		t.Fatal("a decision on a finished run was taken")
	}
}

func TestGateRejectedThroughAPIAndTimedOut(t *testing.T) {
	dir := gatedFactory(t, `"deploy to staging?"`)
	sp := startServe(t, dir)
	rec, err := sp.client.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitWaiting(t, dir)
	if _, err := sp.client.DecideGate(rec.ID, record.GateDecision{Step: "deploy", Reason: "freeze week", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	d := waitDetail(t, sp.client, rec.ID, 30*time.Second)
	if d.Run.State != status.RunFailed || d.Run.Reason != status.ReasonGateRejected || !strings.Contains(d.Run.Message, "freeze week") {
		t.Fatalf("after the rejection: %s %s %s", d.Run.State, d.Run.Reason, d.Run.Message)
	}
	if ev := gateEvent(t, dir, rec.ID, record.EvGateRejected); ev["by"] != "ops" || ev["reason"] != "freeze week" {
		t.Fatalf("gate.rejected: %v", ev)
	}
	sp.stop(t)

	dir = gatedFactory(t, `{message: "deploy?", timeout: 500ms}`)
	res := runKusaw(t, dir, "run")
	if res.code == 0 {
		t.Fatal("a timed-out gate passed")
	}
	id := onlyRun(t, dir)
	if d := loadDetail(t, dir, id); d.Reason != string(status.ReasonGateTimeout) {
		t.Fatalf("after the timeout: %+v", d)
	}
}

func TestNotificationSignedAndDeadURL(t *testing.T) {
	type got struct {
		sig, event string
		body       []byte
	}
	recv := make(chan got, 10)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		recv <- got{r.Header.Get("X-Kusaw-Signature"), r.Header.Get("X-Kusaw-Event"), b}
	})}
	go srv.Serve(l)
	defer srv.Close()
	dl, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + dl.Addr().String() + "/gone"
	dl.Close()
	dir := shapeFactory(t, `  default:
    steps: [broken]
    notify: [{url: `+dead+`}]
`, `  broken: {run: [sh, -c, "exit 2"], continue_on_failure: true}
notify:
  - {url: "http://`+l.Addr().String()+`/hook", on: [run.finished, step.failed], secret: {secret: hook.key}}
`)
	if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("hook.key", "whsec-123"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res := runKusaw(t, dir, "run")
	if res.code != 0 {
		t.Fatalf("a failing notification failed the run: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if time.Since(start) > 40*time.Second {
		t.Fatalf("the dead URL held kusaw run for %s", time.Since(start))
	}
	events := map[string]bool{}
	for len(events) < 2 {
		select {
		case g := <-recv:
			m := hmac.New(sha256.New, []byte("whsec-123"))
			m.Write(g.body)
			if g.sig != "sha256="+hex.EncodeToString(m.Sum(nil)) {
				t.Fatalf("signature %q does not match", g.sig)
			}
			var n struct{ Event, Run, Pipeline, State, Link string }
			json.Unmarshal(g.body, &n)
			if n.Event != g.event || n.Pipeline != "default" || n.Run == "" || n.Link == "" {
				t.Fatalf("body: %s", g.body)
			}
			events[n.Event] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("notifications received: %v", events)
		}
	}
	if !events["run.finished"] || !events["step.failed"] {
		t.Fatalf("notifications received: %v", events)
	}
	id := onlyRun(t, dir)
	if ev := gateEvent(t, dir, id, record.EvNotifyFailed); !strings.HasPrefix(ev["url"].(string), "http://127.0.0.1:") || strings.Contains(ev["url"].(string), "gone") {
		t.Fatalf("notify.failed: %v", ev)
	}
	all := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "events.jsonl"))
	if strings.Contains(all, "whsec-123") {
		t.Fatal("the webhook secret is in the run's events")
	}
}

// TestGateApprovedOnWebPage: the run page shows a waiting gate with its
// buttons; Approve decides it through the API, recorded as the token's
// name.
func TestGateApprovedOnWebPage(t *testing.T) {
	bin := needChromium(t)
	dir := gatedFactory(t, `"deploy to staging?"`)
	yaml := readFile(t, filepath.Join(dir, "factory.yaml")) + "serve: {listen: 127.0.0.1:0}\n"
	writeFile(t, filepath.Join(dir, "factory.yaml"), yaml)
	token := "gate-page-token-0123456789"
	if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set(serve.TokenSecretKey, token); err != nil {
		t.Fatal(err)
	}
	sp := startServe(t, dir)
	var info client.ServeInfo
	b, err := os.ReadFile(filepath.Join(dir, ".kusaw", record.ServeInfoFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Listen == "" {
		t.Fatalf("serve.json: %v %s", err, b)
	}
	rec, err := sp.client.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitWaiting(t, dir)
	c := startChromium(t, bin)
	if err := c.call("Page.navigate", map[string]any{"url": "http://" + info.Listen + "/?token=" + token}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the runs list", 20*time.Second, func() bool {
		v, _ := c.eval(`document.body.dataset.page === "runs"`)
		return v == true
	})
	if err := c.call("Page.navigate", map[string]any{"url": "http://" + info.Listen + "/#/runs/" + rec.ID}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gate and its buttons on the run page", 20*time.Second, func() bool {
		v, _ := c.eval(`!!document.getElementById("approve") && document.getElementById("gate").textContent.includes("deploy to staging?")`)
		return v == true
	})
	if _, err := c.eval(`document.getElementById("approve").click()`); err != nil {
		t.Fatal(err)
	}
	d := waitDetail(t, sp.client, rec.ID, 30*time.Second)
	if d.Run.State != status.RunSucceeded {
		t.Fatalf("after Approve on the page: %s %s", d.Run.State, d.Run.Message)
	}
	if ev := gateEvent(t, dir, rec.ID, record.EvGateApproved); ev["by"] != "token:"+serve.TokenSecretKey {
		t.Fatalf("gate.approved by %v, want the token's name", ev["by"])
	}
}

// TestShapeAttacks: from inside the sandbox, a step cannot approve the gate
// after it (the decision file's folder is not the step's to write: the gate
// times out instead of passing), and a fixer cannot change the hand-off
// folder it reads, while reading it works (the legitimate twin: the fix
// loop passes). As root and as uid 65534.
func TestShapeAttacks(t *testing.T) {
	needSandbox(t)
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, _ := seamDir(t, uid)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
sandbox: {mode: required}
pipelines:
  default: [build, deploy]
steps:
  build:
    run: [sh, -c, 'run=$KUSAW_ARTIFACTS/../../../..; for f in gate-deploy-1.json ../gate-deploy-1.json; do printf "{\"step\":\"deploy\",\"approve\":true,\"by\":\"step\"}" > "$run/$f" 2>/dev/null && echo "WROTE $f"; done; ln -s /dev/null "$run/gate-deploy-1.json" 2>/dev/null && echo LINKED; echo tried']
  deploy:
    gate: {message: "deploy?", timeout: 1s}
    run: [sh, -c, "echo d > d.txt"]
`)
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run")
			id := onlyRun(t, dir)
			if got := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "build", "1", "stdout.log")); got != "tried\n" {
				t.Fatalf("the step reached the run's folder: %q", got)
			}
			if d := loadDetail(t, dir, id); res.code == 0 || d.Reason != string(status.ReasonGateTimeout) {
				t.Fatalf("the gate did not wait for a decision: exit %d, %+v\n%s%s", res.code, d, res.stdout, res.stderr)
			}

			dir, _ = seamDir(t, uid)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
sandbox: {mode: required}
pipelines:
  default: [check]
steps:
  check:
    attempts: 2
    on_failure: fixer
    run: [sh, -c, "test -f fixed.txt || { echo missing; exit 1; }"]
  fixer:
    run: [sh, -c, 'grep -q missing "$KUSAW_PREVIOUS_DIR/stdout.log.tail" || exit 9; for f in outcome stdout.log.tail new; do echo forged > "$KUSAW_PREVIOUS_DIR/$f" 2>/dev/null && echo "WROTE $f"; done; echo yes > fixed.txt']
`)
			if res := runKusawAs(t, uid, 2*time.Minute, dir, "run"); res.code != 0 {
				t.Fatalf("fix loop: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			id = onlyRun(t, dir)
			if got := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "fixer", "1", "stdout.log")); strings.Contains(got, "WROTE") {
				t.Fatalf("the fixer wrote into the hand-off folder: %q", got)
			}
			if got := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "check", "1", "handoff", "stdout.log.tail")); got != "missing\n" {
				t.Fatalf("the hand-off folder changed: %q", got)
			}
		})
	}
}

// TestShapesOnWebPage: the run page's timeline draws a parallel group's
// members and a step's candidates side by side, the kept one marked.
func TestShapesOnWebPage(t *testing.T) {
	bin := needChromium(t)
	dir := shapeFactory(t, "  default: [[left, right], try]\n", `  left: {run: [sh, -c, "echo l > l.txt"]}
  right: {run: [sh, -c, "echo r > r.txt"]}
  try: {candidates: 3, select: all, run: [sh, -c, "test $KUSAW_CANDIDATE != 1"]}
serve: {listen: 127.0.0.1:0}
`)
	token := "shapes-page-token-0123456789"
	if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set(serve.TokenSecretKey, token); err != nil {
		t.Fatal(err)
	}
	sp := startServe(t, dir)
	var info client.ServeInfo
	b, _ := os.ReadFile(filepath.Join(dir, ".kusaw", record.ServeInfoFile))
	if json.Unmarshal(b, &info) != nil || info.Listen == "" {
		t.Fatalf("serve.json: %s", b)
	}
	rec, err := sp.client.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := waitDetail(t, sp.client, rec.ID, 60*time.Second); d.Run.State != status.RunSucceeded {
		t.Fatalf("run: %s %s", d.Run.State, d.Run.Message)
	}
	c := startChromium(t, bin)
	if err := c.call("Page.navigate", map[string]any{"url": "http://" + info.Listen + "/?token=" + token}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the runs list", 20*time.Second, func() bool {
		v, _ := c.eval(`document.body.dataset.page === "runs"`)
		return v == true
	})
	if err := c.call("Page.navigate", map[string]any{"url": "http://" + info.Listen + "/#/runs/" + rec.ID}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the timeline", 20*time.Second, func() bool {
		v, _ := c.eval(`document.querySelectorAll("#timeline .tl-bar").length >= 5`)
		return v == true
	})
	v, _ := c.eval(`[...document.querySelectorAll("#timeline .tl-label")].map(e => e.textContent).join("|")`)
	if labels, _ := v.(string); !strings.Contains(labels, "‖1 left") || !strings.Contains(labels, "‖1 right") || !strings.Contains(labels, "try ×3") {
		t.Fatalf("timeline labels: %q", labels)
	}
	// Three lanes, one bar each, the kept one (candidate 2, the first of
	// the equal diffs) marked.
	v, _ = c.eval(`[...document.querySelectorAll("#timeline .tl-bar")].filter(b => b.title.startsWith("try ")).map(b => b.style.top + " " + b.textContent.slice(0, 4)).join("|")`)
	bars, _ := v.(string)
	if !strings.Contains(bars, "2px") || !strings.Contains(bars, "22px ✓ #2") || !strings.Contains(bars, "42px") {
		t.Fatalf("candidate bars: %q", bars)
	}
}
