package factory

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

// passingObs is what a healthy sandbox shows doctor.
func passingObs() probeObs {
	return probeObs{found: true, outside: []string{"attempt folder"}, secrets: []string{"/home/u/.ssh"}, withData: 1,
		hitsP5: 1, hitsP8: 1, logAllow: true, logRefuse: true,
		out: ProbeOutput{Proxy: "http://127.0.0.1:9", Wrote: []string{}, InsideFailed: []string{}, Visible: []string{},
			Allowed:   ProbeAnswer{Status: 200, Body: "kusaw-doctor-abc", Line: "kusaw-doctor-abc"},
			Denied:    ProbeAnswer{Status: 403, Line: "kusaw: " + DoctorProbeHost + ":80 is not allowed; add it to steps.x.sandbox.egress.allow"},
			DirectErr: "connect: connection refused"}}
}

func probeByID(t *testing.T, ps []DoctorProbe, id string) DoctorProbe {
	t.Helper()
	for _, p := range ps {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("no probe %s in %+v", id, ps)
	return DoctorProbe{}
}

func TestJudgeProbes(t *testing.T) {
	for _, p := range judgeProbes(passingObs()) {
		if p.Status != ProbePass || p.Fix != "" {
			t.Errorf("healthy sandbox: %+v", p)
		}
	}
	cases := []struct {
		name, id, want string
		mod            func(*probeObs)
	}{
		{"write outside seen inside", "P3", "worked", func(o *probeObs) { o.out.Wrote = []string{"/home/u/.kusaw-probe-out"} }},
		{"write outside found on the host", "P3", "worked", func(o *probeObs) { o.leftBehind = []string{"/srv/f/.kusaw-probe-out"} }},
		{"the legitimate write fails", "P3", "a write the step needs", func(o *probeObs) { o.out.InsideFailed = []string{"$TMPDIR/x: read-only file system"} }},
		{"secret readable", "P4", "readable inside", func(o *probeObs) { o.out.Visible = []string{"/home/u/.ssh"} }},
		{"no proxy variable", "P5", "HTTP_PROXY is not set", func(o *probeObs) { o.out.Proxy = "" }},
		{"allowed host refused", "P5", "not reached", func(o *probeObs) { o.out.Allowed = ProbeAnswer{Status: 403, Line: "kusaw: refused"} }},
		{"answer from someone else", "P5", "not from doctor's server", func(o *probeObs) { o.out.Allowed.Body = "hello" }},
		{"server saw nothing", "P5", "server saw 0", func(o *probeObs) { o.hitsP5 = 0 }},
		{"denied host answered", "P6", "was not refused", func(o *probeObs) { o.out.Denied = ProbeAnswer{Status: 200, Line: "welcome"} }},
		{"403 from elsewhere", "P6", "without kusaw's refusal line", func(o *probeObs) { o.out.Denied.Line = "Forbidden" }},
		{"refusal not logged", "P6", "no refuse line", func(o *probeObs) { o.logRefuse = false }},
		{"direct connection worked", "P7", "bypassed the proxy", func(o *probeObs) { o.out.DirectErr = "" }},
		{"server saw a direct request", "P7", "bypassed the proxy", func(o *probeObs) { o.hitsP7 = 1 }},
		{"local service not reached", "P8", "was not reached straight", func(o *probeObs) { o.out.LocalErr = []string{"localhost:9: connection refused"} }},
		{"local connection not forwarded", "P8", "saw no request", func(o *probeObs) { o.hitsP8 = 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := passingObs()
			c.mod(&o)
			ps := judgeProbes(o)
			p := probeByID(t, ps, c.id)
			if p.Status != ProbeFail || !strings.Contains(p.Detail, c.want) || p.Fix == "" {
				t.Errorf("%s: %+v (want fail with %q and a fix)", c.id, p, c.want)
			}
			for _, q := range ps {
				if q.ID != c.id && q.Status != ProbePass {
					t.Errorf("%s failed too: %+v", q.ID, q)
				}
			}
		})
	}
	o := passingObs()
	o.ranErr = "the probe run was refused: sandbox.plan_refused"
	for _, p := range judgeProbes(o) {
		if p.Status != ProbeFail || !strings.Contains(p.Detail, "refused") {
			t.Errorf("probe that did not run: %+v", p)
		}
	}
}

func TestMachineProbes(t *testing.T) {
	ps := machineProbes(sandbox.CheckResult{Backend: "bubblewrap", Path: "/usr/bin/bwrap", Version: "0.8.0", Available: true})
	if ps[0].Status != ProbePass || ps[1].Status != ProbePass {
		t.Errorf("available: %+v", ps)
	}
	ps = machineProbes(sandbox.CheckResult{Backend: "bubblewrap", Reason: status.ReasonSandboxUntrusted, Msg: "/usr/bin/bwrap is owned by uid 1000, not root", Fix: "reinstall"})
	if ps[0].Status != ProbeFail || ps[0].Fix != "reinstall" || ps[1].Status != ProbeNotRun {
		t.Errorf("untrusted: %+v", ps)
	}
	ps = machineProbes(sandbox.CheckResult{Backend: "bubblewrap", Path: "/usr/bin/bwrap", Reason: status.ReasonSandboxNoUserNS, Msg: "no user namespaces", Fix: "allow them"})
	if ps[0].Status != ProbePass || ps[1].Status != ProbeFail || ps[1].Fix != "allow them" {
		t.Errorf("no namespaces: %+v", ps)
	}
}

// TestProbeUnsandboxed is the failing twin from the attacker's side: the
// probe program run without any sandbox writes outside and connects
// directly, and doctor's judgement says so.
func TestProbeUnsandboxed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "kusaw-doctor-x") }))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	// A stand-in proxy that answers everything (it allows what it should refuse).
	px := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "kusaw-doctor-x") }))
	defer px.Close()
	t.Setenv("HTTP_PROXY", px.URL)
	dir := t.TempDir()
	out := filepath.Join(dir, "outside")
	secret := filepath.Join(dir, "ssh")
	if err := os.MkdirAll(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "id_ed25519"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	spec := ProbeSpec{WriteOutside: []string{out}, WriteInside: []string{filepath.Join(dir, "inside")},
		Secrets: []string{secret}, Allowed: "http://localhost:" + port + "/p5", Denied: "http://" + DoctorProbeHost + "/p6", Direct: "127.0.0.1:" + port}
	if err := RunProbe(spec, &b); err != nil {
		t.Fatal(err)
	}
	got, ok := ParseProbeOutput("noise\n" + b.String())
	if !ok {
		t.Fatalf("no marker line in %q", b.String())
	}
	if len(got.Wrote) != 1 || got.DirectErr != "" || got.Denied.Status != 200 || len(got.Visible) != 1 {
		t.Fatalf("unsandboxed probe: %+v", got)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the probe left its file behind")
	}
	ps := judgeProbes(probeObs{found: true, out: got, hitsP5: 1, logAllow: true, logRefuse: false})
	for _, id := range []string{"P3", "P4", "P6", "P7"} {
		if p := probeByID(t, ps, id); p.Status != ProbeFail {
			t.Errorf("%s passed without a sandbox: %+v", id, p)
		}
	}
}

func TestKnownProxyIgnorersNodeVersion(t *testing.T) {
	dir := t.TempDir()
	for v, want := range map[string]string{"v20.20.2": "ignores", "v24.1.0": "honours"} {
		node := filepath.Join(dir, "node-"+v)
		if err := os.WriteFile(node, []byte("#!/bin/sh\necho "+v+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		l := KnownProxyIgnorers(node)
		if l[0].Tool != "node" || !strings.Contains(l[0].Why, want) || !strings.Contains(l[0].Why, v) {
			t.Errorf("%s: %+v", v, l[0])
		}
		if len(l) < 10 {
			t.Errorf("short list: %+v", l)
		}
	}
}

func TestDoctorSandboxUnavailable(t *testing.T) {
	f := testkit.Factory(t, `version: 1
repos:
  app: {path: ./app}
sandbox:
  egress:
    allow: [registry.npmjs.org]
    inject: provider
pipelines:
  default: [plan, test]
steps:
  plan:
    prompt: hi
    sandbox: {mode: required, network: allowlist}
  test:
    per_repo: true
    run: [node, test.js]
    sandbox: {mode: required, network: allowlist, egress: {allow: [proxy.golang.org]}}
`, "app")
	e, err := New(f, Options{Kusaw: "/bin/false", SandboxCheck: func() sandbox.CheckResult {
		return sandbox.CheckResult{Backend: "bubblewrap", Path: "/usr/bin/bwrap", Reason: status.ReasonSandboxNoUserNS, Msg: "no user namespaces", Fix: "allow them"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.Doctor(context.Background(), DoctorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != int(status.ExitSandboxUnavailable) || rep.OK {
		t.Errorf("exit %d ok %v", rep.ExitCode, rep.OK)
	}
	if len(rep.Steps) != 2 {
		t.Fatalf("steps: %+v", rep.Steps)
	}
	plan, test := rep.Steps[0], rep.Steps[1]
	if plan.Mode != "required" || plan.ModeOrigin != "step:plan" || plan.Network != "allowlist" {
		t.Errorf("plan: %+v", plan.StepReport)
	}
	origins := map[string]string{}
	for _, h := range plan.Allowlist {
		origins[h.Host] = h.Origin
	}
	if origins["registry.npmjs.org"] != "factory" || origins["api.anthropic.com"] != "provider:claude-code" {
		t.Errorf("allowlist origins: %v", origins)
	}
	if strings.Join(plan.Inject, ",") != "ANTHROPIC_BASE_URL,ANTHROPIC_API_KEY" {
		t.Errorf("inject names: %v", plan.Inject)
	}
	if plan.Capabilities == nil {
		t.Error("agent step without a capability matrix")
	} else if c, _ := plan.Capabilities.Get("network"); c.Level != "supported" {
		t.Errorf("network capability: %+v", c)
	}
	if len(test.W1) != 1 || !strings.Contains(test.W1[0].Message, "node") {
		t.Errorf("W1 for a node step: %+v", test.W1)
	}
	if len(test.Attempts) != 1 || test.Attempts[0].ModeOrigin != "step:test" {
		t.Errorf("per_repo attempts: %+v", test.Attempts)
	}
	if !strings.Contains(test.ProxySocket, "egress.sock") {
		t.Errorf("proxy socket: %q", test.ProxySocket)
	}
	for _, s := range rep.Steps {
		for _, p := range s.Probes {
			if p.Status != ProbeNotRun {
				t.Errorf("%s %s ran without a backend: %+v", s.ID, p.ID, p)
			}
		}
	}
	if probeByID(t, rep.Probes, "P2").Status != ProbeFail {
		t.Errorf("P2: %+v", rep.Probes)
	}
	if _, err := os.Stat(filepath.Join(e.State.Dir, "runs")); err == nil {
		if ents, _ := os.ReadDir(filepath.Join(e.State.Dir, "runs")); len(ents) > 0 {
			t.Errorf("doctor recorded a run without a backend: %v", ents)
		}
	}
	var b strings.Builder
	WriteDoctorText(&b, rep)
	for _, want := range []string{"P2 fail", "fix: allow them", "registry.npmjs.org", "provider:claude-code", "ANTHROPIC_API_KEY", "W1:"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := e.Doctor(context.Background(), DoctorOptions{Step: "nope"}); err == nil || !strings.Contains(err.Error(), "unknown step") {
		t.Errorf("unknown step: %v", err)
	}
}

// Doctor says what the backend does not protect; on macOS that includes
// the Seatbelt limits (process listing, detached processes).
func TestDoctorTextListsBackendLimits(t *testing.T) {
	for _, backend := range []string{"bubblewrap", "seatbelt"} {
		_, limits := sandbox.ProtectionLists(backend)
		rep := &DoctorReport{File: "f", Sandbox: SandboxReport{Backend: backend, Available: true}, NotProtected: limits}
		var b strings.Builder
		WriteDoctorText(&b, rep)
		if len(limits) == 0 || !strings.Contains(b.String(), "not protected by the "+backend+" backend") {
			t.Fatalf("%s: no limits printed:\n%s", backend, b.String())
		}
		for _, l := range limits {
			if !strings.Contains(b.String(), l) {
				t.Errorf("%s: limit missing from doctor's text: %s", backend, l)
			}
		}
	}
	_, mac := sandbox.ProtectionLists("seatbelt")
	if !strings.Contains(strings.ToLower(strings.Join(mac, " ")), "process") {
		t.Fatal("the macOS limits do not mention process listing")
	}
}
