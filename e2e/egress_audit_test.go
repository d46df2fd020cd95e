package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// network: audit learns a step's allowlist: two unlisted hosts are
// admitted and logged would_refuse, a metadata address is still refused,
// egress suggest prints exactly the two entries, and with them pasted in
// the same step passes under allowlist.
func TestEgressAuditSuggest(t *testing.T) {
	needSandbox(t)
	fx := newEgressFixture(t)
	fx.dns.set("svc.test", "127.0.0.1")
	fx.dns.set("b.test", "127.0.0.1")
	fx.dns.set("metsvc.test", "169.254.169.254")
	metaHit := false
	fx.serveHTTP(t, newUpstream(t), false, func(w http.ResponseWriter, r *http.Request) { metaHit = true })
	script := fmt.Sprintf(`set -e
curl -sS --cacert %[1]s https://svc.test:%[2]s/audit-svc; echo
curl -sS http://b.test:%[3]s/audit-b; echo
if curl -sS -m 5 http://metsvc.test:%[3]s/meta; then echo; fi`, fx.caPEM, fx.tlsUp.port, fx.plainUp.port)
	write := func(dir, network, allow string) {
		writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
sandbox:
  mode: required
  network: `+network+`
  allow_read: [`+fx.tools+`]
  egress:
    resolver: "`+fx.dns.addr+`"
    allow_ranges: [127.0.0.0/8]
    allow: [`+allow+`]
pipelines:
  default: [fetch]
steps:
  fetch:
    run:
      - sh
      - -c
      - |
        `+strings.ReplaceAll(script, "\n", "\n        ")+`
`)
	}
	dir := factoryDir(t, "version: 1\n", "app")
	write(dir, "audit", "")
	r := runKusaw(t, dir, "run")
	if r.code != 0 {
		t.Fatalf("the audit run failed: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr+r.stdout, "fetch: egress audit: b.test:"+fx.plainUp.port+" would be refused") {
		t.Errorf("kusaw run does not show the audit's findings:\n%s%s", r.stdout, r.stderr)
	}
	id := onlyRun(t, dir)
	adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "fetch", "1")
	out := readFile(t, filepath.Join(adir, "stdout.log"))
	if !strings.Contains(out, "hello over tls /audit-svc") || !strings.Contains(out, "hello over http /audit-b") || !strings.Contains(out, "kusaw: metsvc.test") {
		t.Fatalf("stdout:\n%s", out)
	}
	if metaHit || fx.plainUp.saw("/meta") {
		t.Fatal("the metadata address was dialled")
	}
	run := sandboxRun{adir: adir}
	would := 0
	for _, m := range run.egressLines(t) {
		if m["decision"] == "would_refuse" {
			would++
		}
	}
	if would != 2 || !run.logged(t, "would_refuse", "svc.test", 0, "host.not_allowed") || !run.logged(t, "would_refuse", "b.test", 0, "host.not_allowed") ||
		!run.logged(t, "refuse", "metsvc.test", 0, "address.refused") {
		t.Fatalf("egress.log: want two would_refuse and the metadata refusal: %v", run.egressLines(t))
	}
	ev := readFile(t, filepath.Join(adir, "events.jsonl"))
	if strings.Count(ev, `"type":"egress.would_refuse"`) != 2 {
		t.Errorf("want two egress.would_refuse events:\n%s", ev)
	}
	run.verify(t, dir)

	s := runKusaw(t, dir, "egress", "suggest", id)
	wantA, wantB := "svc.test:"+fx.tlsUp.port, "b.test:"+fx.plainUp.port
	if s.code != 0 || strings.Count(s.stdout, "  - ") != 2 || !strings.Contains(s.stdout, "  - "+wantA+"  #") || !strings.Contains(s.stdout, "  - "+wantB+"  #") {
		t.Fatalf("egress suggest: %d\n%s%s", s.code, s.stdout, s.stderr)
	}
	j := runKusaw(t, dir, "egress", "suggest", id, "--step", "fetch", "--json")
	var sug []struct {
		Entry     string `json:"entry"`
		BytesDown int64  `json:"bytes_down"`
	}
	if err := json.Unmarshal([]byte(j.stdout), &sug); err != nil || len(sug) != 2 || sug[0].Entry != wantB || sug[1].Entry != wantA || sug[1].BytesDown == 0 {
		t.Fatalf("egress suggest --json: %v %+v\n%s", err, sug, j.stdout)
	}

	// The entries pasted in, the network switched to allowlist: the same
	// step passes, and nothing is would_refuse any more.
	dir2 := factoryDir(t, "version: 1\n", "app")
	write(dir2, "allowlist", `"`+wantA+`", "`+wantB+`"`)
	r = runKusaw(t, dir2, "run")
	if r.code != 0 {
		t.Fatalf("the allowlist run failed: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id2 := onlyRun(t, dir2)
	out = readFile(t, filepath.Join(dir2, ".kusaw", "runs", id2, "steps", "fetch", "1", "stdout.log"))
	if !strings.Contains(out, "hello over tls /audit-svc") || !strings.Contains(out, "hello over http /audit-b") {
		t.Fatalf("stdout:\n%s", out)
	}
	// What the allowlist run's proxy refused for want of an entry is
	// suggested too (the step still tries metsvc.test, which allowlist
	// refuses before resolving it); the pasted entries are not.
	if s := runKusaw(t, dir2, "egress", "suggest", id2); strings.Contains(s.stdout, wantA) || strings.Contains(s.stdout, wantB) || !strings.Contains(s.stdout, "metsvc.test") {
		t.Fatalf("suggest after allowlist: %s", s.stdout)
	}
	// Without the entries, allowlist refuses them (the twin of audit).
	dir3 := factoryDir(t, "version: 1\n", "app")
	write(dir3, "allowlist", "")
	if r = runKusaw(t, dir3, "run"); r.code == 0 || !strings.Contains(r.stderr, "svc.test:"+fx.tlsUp.port+" is not allowed") {
		t.Fatalf("allowlist without the entries: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
