package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/secretstore"
)

// doctorReport is the part of kusaw sandbox doctor --json the tests read.
type doctorReport struct {
	OK       bool `json:"ok"`
	ExitCode int  `json:"exit_code"`
	Probes   []struct {
		ID, Status, Detail, Fix string
	} `json:"probes"`
	W1Known []struct{ Tool, Why string } `json:"w1_known"`
	Steps   []struct {
		ID         string `json:"id"`
		Mode       string `json:"mode"`
		ModeOrigin string `json:"mode_origin"`
		Network    string `json:"network"`
		Allowlist  []struct{ Host, Origin string }
		ProbeNotes []string        `json:"probe_notes"`
		EgressLog  string          `json:"egress_log"`
		Plan       json.RawMessage `json:"plan"`
		W1         []struct{ Code, Message string }
		Probes     []struct {
			ID, Status, Detail, Fix string
		} `json:"probes"`
	} `json:"steps"`
}

// fakeHome makes a home with an SSH key in it, so P4 has something to hide.
func fakeHome(t *testing.T) string {
	h := t.TempDir()
	writeFile(t, filepath.Join(h, ".ssh", "id_ed25519"), "not a real key\n")
	return h
}

// TestSandboxDoctorProbes runs every probe for real on a factory with an
// allowlisted command step and an agent step whose network is open.
func TestSandboxDoctorProbes(t *testing.T) {
	needSandbox(t)
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
setup:
  - [sh, -c, "echo ran >> \"$SETUP_MARK\""]
sandbox:
  egress:
    allow: [registry.npmjs.org]
pipelines:
  default: [build, review]
steps:
  build:
    run: [node, build.js]
    env:
      BUILD_TOKEN: {secret: build.token}
    sandbox:
      mode: required
      network: allowlist
      egress:
        allow: [proxy.golang.org]
        inject: [{host: api.example.test, header: x-api-key, secret: example.key, base_url_env: EXAMPLE_BASE_URL, key_env: EXAMPLE_KEY}]
  review:
    prompt: review it
`, "app")
	const token, apiKey = "doctor-e2e-step-token-9137", "doctor-e2e-inject-key-2281"
	store := secretstore.OpenDir(filepath.Join(dir, "secrets"))
	if err := errors.Join(store.Set("build.token", token), store.Set("example.key", apiKey)); err != nil {
		t.Fatal(err)
	}
	home := fakeHome(t)
	mark := filepath.Join(t.TempDir(), "setup-ran")
	t.Setenv("SETUP_MARK", mark)
	res := runKusawEnv(t, dir, []string{"HOME=" + home}, "sandbox", "doctor", "--json")
	if res.code != 0 {
		t.Fatalf("doctor exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	var rep doctorReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, res.stdout)
	}
	if !rep.OK || len(rep.Probes) != 2 || len(rep.Steps) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	nodeListed := false
	for _, w := range rep.W1Known {
		nodeListed = nodeListed || w.Tool == "node"
	}
	if !nodeListed {
		t.Error("W1 does not list node")
	}
	for _, s := range rep.Steps {
		if len(s.Probes) != 6 {
			t.Fatalf("step %s probes: %+v", s.ID, s.Probes)
		}
		for _, p := range s.Probes {
			if p.Status != "pass" {
				t.Errorf("step %s %s: %s %s (fix %s)", s.ID, p.ID, p.Status, p.Detail, p.Fix)
			}
		}
		if len(s.Plan) == 0 {
			t.Errorf("step %s: no plan", s.ID)
		}
		if v := runKusaw(t, dir, "log", "verify", s.EgressLog); v.code != 0 {
			t.Errorf("step %s: log verify %s: %s%s", s.ID, s.EgressLog, v.stdout, v.stderr)
		}
		elog := readFile(t, s.EgressLog)
		if !strings.Contains(elog, `"host":"kusaw-doctor-probe.invalid"`) || !strings.Contains(elog, `"decision":"refuse"`) {
			t.Errorf("step %s egress.log lacks the refusal:\n%s", s.ID, elog)
		}
	}
	build, review := rep.Steps[0], rep.Steps[1]
	if _, err := os.Stat(mark); err == nil {
		t.Error("doctor ran the factory's setup commands")
	}
	// The twin: kusaw sandbox exec runs them, so the mark can appear.
	if r := runKusawEnv(t, dir, []string{"HOME=" + home}, "sandbox", "exec", "--step", "build", "--", "true"); r.code != 0 {
		t.Errorf("sandbox exec: %d %s", r.code, r.stderr)
	} else if _, err := os.Stat(mark); err != nil {
		t.Error("setup did not run for sandbox exec either: the check above proves nothing")
	}
	// Names only: neither secret is in doctor's output or the probe runs' records.
	txtAll := runKusawEnv(t, dir, []string{"HOME=" + home}, "sandbox", "doctor")
	for _, out := range []string{res.stdout, res.stderr, txtAll.stdout, txtAll.stderr} {
		if strings.Contains(out, token) || strings.Contains(out, apiKey) {
			t.Errorf("a secret value is in doctor's output")
		}
	}
	if hits := append(grepDir(t, filepath.Join(dir, ".kusaw"), token), grepDir(t, filepath.Join(dir, ".kusaw"), apiKey)...); len(hits) > 0 {
		t.Errorf("a secret value is in the records: %v", hits)
	}
	if !strings.Contains(txtAll.stdout, "injected:   EXAMPLE_BASE_URL, EXAMPLE_KEY") {
		t.Errorf("doctor does not name the injected variables:\n%s", txtAll.stdout)
	}
	if build.Mode != "required" || build.ModeOrigin != "step:build" || build.Network != "allowlist" {
		t.Errorf("build: %+v", build)
	}
	origins := map[string]string{}
	for _, h := range build.Allowlist {
		origins[h.Host] = h.Origin
	}
	if origins["registry.npmjs.org"] != "factory" || origins["proxy.golang.org"] != "step:build" {
		t.Errorf("build allowlist: %v", origins)
	}
	if len(build.W1) == 0 || !strings.Contains(build.W1[0].Message, "node") {
		t.Errorf("build's node command is not named as W1: %+v", build.W1)
	}
	if review.Mode != "off" || review.Network != "open" || !strings.Contains(strings.Join(review.ProbeNotes, "\n"), "network is open") {
		t.Errorf("review: mode %s network %s notes %v", review.Mode, review.Network, review.ProbeNotes)
	}
	for _, p := range build.Probes {
		if p.ID == "P4" && !strings.Contains(p.Detail, filepath.Join(home, ".ssh")) {
			t.Errorf("P4 did not check ~/.ssh: %s", p.Detail)
		}
	}
	// The text form, for one step.
	txt := runKusawEnv(t, dir, []string{"HOME=" + home}, "sandbox", "doctor", "--step", "build")
	if txt.code != 0 || !strings.Contains(txt.stdout, "P7 pass") || !strings.Contains(txt.stdout, "proxy.golang.org") || strings.Contains(txt.stdout, "step review") {
		t.Errorf("doctor --step build: %d\n%s%s", txt.code, txt.stdout, txt.stderr)
	}
	// The view, entry by entry with its origin: the system folders, the
	// step's worktree; never the host's root.
	for _, want := range []string{"view (in mount order", "system      read-only         /usr", "worktree    writable", "system      read-only         /  ("} {
		if !strings.Contains(txt.stdout, want) {
			t.Errorf("doctor --step build does not print %q in the view:\n%s", want, txt.stdout)
		}
	}
	if strings.Contains(txt.stdout, "read-only         / <-") {
		t.Errorf("the view binds the host's root:\n%s", txt.stdout)
	}
	if bad := runKusaw(t, dir, "sandbox", "doctor", "--step", "nope"); bad.code != 2 || !strings.Contains(bad.stderr, "unknown step") {
		t.Errorf("unknown step: %d %s", bad.code, bad.stderr)
	}
	// Doctor's and exec's runs are kept apart from the pipelines' (issue
	// 27: each doctor added runs to kusaw runs).
	if r := runKusaw(t, dir, "runs"); !strings.HasPrefix(r.stdout, "no pipeline runs yet (start one with: kusaw run); ") || !strings.Contains(r.stdout, "kusaw runs --all") {
		t.Errorf("kusaw runs after doctor:\n%s", r.stdout)
	}
	if r := runKusaw(t, dir, "runs", "--all"); !strings.Contains(r.stdout, "(sandbox doctor)") || !strings.Contains(r.stdout, "(sandbox exec)") {
		t.Errorf("kusaw runs --all after doctor and exec:\n%s", r.stdout)
	}
}

// TestSandboxDoctorProbeFails is the twin: allow_write naming the
// factory's own folder lets the sandbox write outside its attempt, and
// doctor says so with the fix, exiting 1.
func TestSandboxDoctorProbeFails(t *testing.T) {
	needSandbox(t)
	// The factory's folder holds neither the repo nor the state, so the
	// plan accepts it as writable.
	dir := factoryDir(t, "", "app")
	fdir := filepath.Join(dir, "factory")
	writeFile(t, filepath.Join(fdir, "factory.yaml"), `version: 1
state_dir: ../state
repos:
  app: {path: ../app}
sandbox:
  allow_write: ["."]
pipelines:
  default: [build]
steps:
  build:
    run: [true]
    sandbox: required
`)
	secrets := filepath.Join(t.TempDir(), "secrets")
	res := runKusawEnv(t, fdir, []string{"HOME=" + fakeHome(t), "KUSAW_SECRETS_DIR=" + secrets}, "sandbox", "doctor", "--json")
	if res.code != 1 {
		t.Fatalf("doctor exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	var rep doctorReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Steps[0].Probes {
		switch p.ID {
		case "P3":
			if p.Status != "fail" || !strings.Contains(p.Detail, filepath.Join(fdir, ".kusaw-probe-out")) || !strings.Contains(p.Fix, "allow_write") {
				t.Errorf("P3: %+v", p)
			}
		default:
			if p.Status != "pass" {
				t.Errorf("%s: %+v", p.ID, p)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(fdir, ".kusaw-probe-out")); err == nil {
		t.Error("doctor left its probe file behind")
	}
}
