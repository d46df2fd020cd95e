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
