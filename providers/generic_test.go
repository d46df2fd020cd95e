package providers

import (
	"strings"
	"testing"

	"github.com/kusaw/kusaw/status"
)

// An agent described as data: sh stands in for its CLI and prints JSON
// lines in the shape the definition's pointers name.
func TestGenericAgent(t *testing.T) {
	script := `echo '{"kind":"start","meta":{"session":"s-42"}}'; echo "{\"kind\":\"say\",\"text\":\"$1\"}"; ` +
		`echo '{"kind":"done","status":"ok","answer":"all done","stats":{"in":120,"out":30,"cost":0.02}}'`
	def := AgentDef{Name: "shagent", Argv: []string{"sh", "-c", script, "sh", "{prompt}", "{model}"}, Format: "jsonl",
		ResultWhen: "/kind=done", Success: "/status", SuccessValue: "ok", Text: "/answer", Session: "/meta/session",
		InputTokens: "/stats/in", OutputTokens: "/stats/out", CostUSD: "/stats/cost", SandboxOffArgs: nil,
		LoginFolders: []string{"~/.shagent"}, EgressHosts: []string{"api.example.com"}}
	p, err := NewAgent(def)
	if err != nil {
		t.Fatal(err)
	}
	argv, err := p.Argv(RunRequest{Prompt: "hello agent"})
	if err != nil || argv[0] != "sh" || argv[len(argv)-1] != "hello agent" {
		t.Fatalf("argv %q %v (an unset {model} is dropped)", argv, err)
	}
	r := runAgent(t, p, argv, t.TempDir())
	if o, reason := p.Outcome(r.res, r.code); o != status.OutcomePassed || reason != status.ReasonNone {
		t.Fatalf("outcome %s %s %+v", o, reason, r.res)
	}
	if r.res.SessionID != "s-42" || r.res.Text != "all done" || r.res.Usage == nil || r.res.Usage.InputTokens != 120 || *r.res.CostUSD != 0.02 {
		t.Fatalf("result %+v usage %+v", r.res, r.res.Usage)
	}
	if got := p.Spec().LoginPaths("/home/u", func(string) string { return "" }); len(got) != 1 || got[0] != "/home/u/.shagent" {
		t.Fatalf("login folders %q", got)
	}
	// An error result fails the attempt whatever the exit code.
	bad := strings.Replace(script, `"status":"ok"`, `"status":"rate_limited"`, 1)
	def.Argv = []string{"sh", "-c", bad, "sh", "{prompt}"}
	p, _ = NewAgent(def)
	argv, _ = p.Argv(RunRequest{Prompt: "x"})
	r = runAgent(t, p, argv, t.TempDir())
	if o, reason := p.Outcome(r.res, r.code); o != status.OutcomeFailed || reason != status.ReasonProviderError {
		t.Fatalf("error result: %s %s", o, reason)
	}
	// Text format: the exit code decides.
	tp, err := NewAgent(AgentDef{Name: "textagent", Argv: []string{"sh", "-c", "echo $1; exit 3", "sh", "{prompt}"}, Format: "text"})
	if err != nil {
		t.Fatal(err)
	}
	argv, _ = tp.Argv(RunRequest{Prompt: "x"})
	r = runAgent(t, tp, argv, t.TempDir())
	if o, _ := tp.Outcome(r.res, r.code); o != status.OutcomeFailed || r.code != 3 {
		t.Fatalf("text agent exit 3: %s", o)
	}
	for _, d := range []AgentDef{
		{Name: "claude-code", Argv: []string{"x", "{prompt}"}, Format: "text"},
		{Name: "a", Argv: []string{"x"}, Format: "text"},
		{Name: "a", Argv: []string{"x", "{prompt}"}, Format: "xml"},
		{Name: "a", Argv: []string{"x", "{prompt}"}, Format: "jsonl"},
		{Name: "a", Argv: []string{"x", "{prompt}"}, Format: "jsonl", ResultWhen: "type=result"},
		{Name: "a", Argv: []string{"x", "{prompt}"}, Format: "text", InjectHost: "api.x"},
	} {
		if _, err := NewAgent(d); err == nil {
			t.Errorf("accepted %+v", d)
		}
	}
}
