package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// An allowlist run the proxy refused two hosts in: egress suggest lists
// their entries (not "needed no host"), and log verify RUN checks every
// log of the run (its events, the attempt's events and egress.log) with
// no file path given; a name that is neither a file nor a run is refused
// on one line.
func TestAllowlistRunSuggestAndVerifyByRun(t *testing.T) {
	needSandbox(t)
	need(t, "curl")
	dir := factoryDir(t, "version: 1\n", "app")
	writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [fetch]
steps:
  fetch:
    sandbox: {mode: required, network: allowlist}
    run: [sh, -c, 'curl -s http://pkg.blocked.example/ >/dev/null; curl -s http://reg.blocked.example:8080/ >/dev/null; exit 0']
`)
	if r := runKusaw(t, dir, "run"); r.code != 0 {
		t.Fatalf("run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := onlyRun(t, dir)
	s := runKusaw(t, dir, "egress", "suggest", id)
	if s.code != 0 || !strings.Contains(s.stdout, "  - pkg.blocked.example  # 1 connection(s) refused") || !strings.Contains(s.stdout, "  - reg.blocked.example:8080  #") {
		t.Fatalf("egress suggest on an allowlist run: %d\n%s%s", s.code, s.stdout, s.stderr)
	}
	v := runKusaw(t, dir, "log", "verify", id)
	if v.code != 0 || strings.Count(v.stdout, ": OK") != 3 {
		t.Fatalf("log verify %s: %d\n%s%s", id, v.code, v.stdout, v.stderr)
	}
	for _, f := range []string{filepath.Join(id, "events.jsonl"), filepath.Join("fetch", "1", "events.jsonl"), filepath.Join("fetch", "1", "egress.log")} {
		if !strings.Contains(v.stdout, f+": OK") {
			t.Errorf("log verify does not check %s:\n%s", f, v.stdout)
		}
	}
	bad := runKusaw(t, dir, "log", "verify", "20990101-000000-none")
	if bad.code != 5 || !strings.Contains(bad.stderr, "neither a log file nor a run") || strings.Count(bad.stderr, "\n") != 1 {
		t.Errorf("unknown run: %d %q", bad.code, bad.stderr)
	}
}

// egress check without --step decides under the default pipeline's steps:
// a host only the agent step allows is allowed, and the answer names the
// step; a host no step allows is refused (exit 8), saying so; --step still
// asks one step (build refuses what agent allows).
func TestEgressCheckDefaultPipelineSteps(t *testing.T) {
	dir := factoryDir(t, "version: 1\n", "app")
	writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
sandbox: {mode: required, network: allowlist}
pipelines:
  default: [build, agent]
steps:
  build:
    run: ["true"]
  agent:
    sandbox:
      egress: {allow: ["localhost:8099"]}
    run: ["true"]
`)
	c := runKusaw(t, dir, "egress", "check", "localhost:8099")
	if c.code != 0 || !strings.Contains(c.stdout, "(step:agent)") || !strings.Contains(c.stdout, "decided under step agent's allowlist: the first step of pipeline default (build, agent)") {
		t.Errorf("check without --step: %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	c = runKusaw(t, dir, "egress", "check", "localhost:8098")
	if c.code != 8 || !strings.Contains(c.stdout, "no step of pipeline default (build, agent) allows it") {
		t.Errorf("check of a host no step allows: %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	if c = runKusaw(t, dir, "egress", "check", "--step", "build", "localhost:8099"); c.code != 8 {
		t.Errorf("--step build: %d\n%s", c.code, c.stdout)
	}
}

// kusaw logs --events shows the events without the chain's seal lines;
// --seals shows them too.
func TestLogsEventsHideSeals(t *testing.T) {
	dir := factoryDir(t, "version: 1\n", "app")
	writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [hello]
steps:
  hello:
    run: [echo, hi]
`)
	if r := runKusaw(t, dir, "run"); r.code != 0 {
		t.Fatalf("run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := onlyRun(t, dir)
	ev := runKusaw(t, dir, "logs", id, "--events")
	if ev.code != 0 || !strings.Contains(ev.stdout, `"type":"run.started"`) || !strings.Contains(ev.stdout, `"type":"attempt.finished"`) || strings.Contains(ev.stdout, `{"seal":`) {
		t.Errorf("logs --events: %d\n%s%s", ev.code, ev.stdout, ev.stderr)
	}
	all := runKusaw(t, dir, "logs", id, "--events", "--seals")
	if all.code != 0 || !strings.Contains(all.stdout, `{"seal":`) || !strings.Contains(all.stdout, `"type":"run.started"`) {
		t.Errorf("logs --events --seals: %d\n%s%s", all.code, all.stdout, all.stderr)
	}
}
