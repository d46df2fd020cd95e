package providers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/status"
)

// Claude Code repeats a message's usage on each of its content blocks:
// counted once per message id, with its last value.
const claudeUsageStream = `{"type":"system","subtype":"init","session_id":"s-2","model":"claude-sonnet-4-5"}
{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","content":[{"type":"text","text":"a"}],"usage":{"input_tokens":100,"output_tokens":5,"cache_read_input_tokens":1000,"cache_creation_input_tokens":50}}}
{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}],"usage":{"input_tokens":100,"output_tokens":5,"cache_read_input_tokens":1000,"cache_creation_input_tokens":50}}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
{"type":"assistant","message":{"id":"m2","model":"claude-sonnet-4-5","content":[{"type":"text","text":"done"}],"usage":{"input_tokens":200,"output_tokens":20}}}
`

func TestClaudeLiveUsage(t *testing.T) {
	res, evs := parse(t, "claude-code", claudeUsageStream)
	var usage []map[string]any
	for _, e := range evs {
		if e.Type == EventUsage {
			usage = append(usage, e.Data)
		}
	}
	if len(usage) != 2 {
		t.Fatalf("usage events %d, want one per message (2): %s", len(usage), types(evs))
	}
	if usage[0]["tokens"] != int64(1155) || usage[1]["tokens"] != int64(1375) || usage[1]["turns"] != 2 {
		t.Fatalf("running totals %v", usage)
	}
	// No result (the process was stopped): the running totals are the usage.
	if res.Seen || res.Usage == nil || res.Usage.Tokens() != 1375 || res.Usage.CostUSD != nil || res.Usage.Turns != 2 {
		t.Fatalf("usage without a result: %+v", res.Usage)
	}
	// With a result, the result's usage wins.
	res, _ = parse(t, "claude-code", claudeUsageStream+`{"type":"result","subtype":"success","is_error":false,"num_turns":2,"total_cost_usd":0.5,"usage":{"input_tokens":300,"output_tokens":25,"cache_read_input_tokens":1000,"cache_creation_input_tokens":50},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":250,"outputTokens":20,"cacheReadInputTokens":1000,"cacheCreationInputTokens":50,"costUSD":0.4},"claude-haiku-4-5":{"inputTokens":50,"outputTokens":5,"costUSD":0.1}}}`)
	u := res.Usage
	if u == nil || u.InputTokens != 300 || u.OutputTokens != 25 || u.CacheReadTokens != 1000 || u.CacheWriteTokens != 50 || *u.CostUSD != 0.5 || u.Turns != 2 {
		t.Fatalf("result usage %+v", u)
	}
	if len(u.Models) != 2 || u.Models["claude-haiku-4-5"].InputTokens != 50 || *u.Models["claude-sonnet-4-5"].CostUSD != 0.4 || u.Models["claude-sonnet-4-5"].CacheReadTokens != 1000 {
		t.Fatalf("per model %+v", u.Models)
	}
	b, _ := json.Marshal(u)
	if !strings.Contains(string(b), `"cost_usd":0.5`) || !strings.Contains(string(b), `"models":{`) {
		t.Fatalf("usage JSON %s", b)
	}
}

func TestClaudeRealModelUsage(t *testing.T) {
	b, err := os.ReadFile("testdata/claude-2.1.332-fakeapi.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, _ := parse(t, "claude-code", string(b))
	m := res.Usage.Models["claude-opus-5-5"]
	if m == nil || m.InputTokens != 10 || m.OutputTokens != 5 || m.CostUSD == nil || res.Usage.CostUSD == nil {
		t.Fatalf("modelUsage of a real result: %+v", res.Usage)
	}
}

func TestNoUsageIsAbsent(t *testing.T) {
	for _, name := range Names() {
		res, _ := parse(t, name, `{"type":"result","subtype":"success","is_error":false,"result":"x"}`)
		if res.Usage != nil {
			t.Errorf("%s: a result without usage gave %+v, want none (absent, not zero)", name, res.Usage)
		}
	}
}

// Today's Cursor stream: thinking deltas, extra keys beside and inside a
// tool call, an MCP call, and a result with usage.
const cursorNewStream = `{"type":"system","subtype":"init","apiKeySource":"env","cwd":"/w/app","session_id":"c-2","model":"Auto","permissionMode":"default"}
{"type":"thinking","subtype":"delta","text":"Let me ","session_id":"c-2","timestamp_ms":1}
{"type":"thinking","subtype":"delta","text":"look.","session_id":"c-2","timestamp_ms":2}
{"type":"thinking","subtype":"completed","session_id":"c-2","timestamp_ms":3}
{"type":"tool_call","subtype":"started","model_call_id":"mc1","tool_call":{"metadata":{"x":1},"readToolCall":{"args":{"path":"a.go","toolCallId":"call_9"}},"startedAtMs":5,"toolCallId":"call_9"},"session_id":"c-2"}
{"type":"tool_call","subtype":"completed","model_call_id":"mc1","tool_call":{"readToolCall":{"args":{"path":"a.go","toolCallId":"call_9"},"result":{"success":{"content":"x"}}},"startedAtMs":5,"toolCallId":"call_9"},"session_id":"c-2"}
{"type":"tool_call","subtype":"started","call_id":"call_10","tool_call":{"mcpToolCall":{"args":{"name":"docs-search","toolName":"search","providerIdentifier":"docs","args":{"q":"x"}}}},"session_id":"c-2"}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Done."}]},"session_id":"c-2"}
{"type":"result","subtype":"success","duration_ms":900,"is_error":false,"result":"Done.","session_id":"c-2","usage":{"inputTokens":1200,"outputTokens":80,"cacheReadTokens":3000,"cacheWriteTokens":10}}
`

func TestCursorStreamDetails(t *testing.T) {
	res, evs := parse(t, "cursor", cursorNewStream)
	if got := types(evs); got != "init,thinking,tool,tool,tool,text,result" {
		t.Fatalf("events %s", got)
	}
	if evs[1].Data["text"] != "Let me look." {
		t.Fatalf("thinking folded into one event: %v", evs[1].Data)
	}
	if d := evs[2].Data; d["name"] != "read" || d["id"] != "call_9" || strings.Contains(d["input"].(string), "toolCallId") {
		t.Fatalf("tool with extra keys: %v", d)
	}
	if d := evs[4].Data; d["name"] != "search" || d["mcp_server"] != "docs" {
		t.Fatalf("MCP tool: %v", d)
	}
	u := res.Usage
	if u == nil || u.InputTokens != 1200 || u.OutputTokens != 80 || u.CacheReadTokens != 3000 || u.CacheWriteTokens != 10 || u.CostUSD != nil || u.Turns != 0 {
		t.Fatalf("cursor usage %+v", u)
	}
	if res.Tools != 2 {
		t.Fatalf("tools %d", res.Tools)
	}
}

func TestMultipleResults(t *testing.T) {
	ones := map[string]string{
		"claude-code": `{"type":"result","subtype":"success","is_error":false,"result":"x"}`,
		"cursor":      `{"type":"result","subtype":"success","is_error":false,"result":"x"}`,
		"codex":       `{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}`,
		"gemini":      `{"type":"result","status":"success","stats":{"input_tokens":1}}`,
		"opencode":    `{"type":"step_finish","sessionID":"ses_1","part":{"reason":"stop","tokens":{"input":1,"output":1},"cost":0}}`,
	}
	for _, name := range Names() {
		one := ones[name] + "\n"
		res, _ := parse(t, name, one+one)
		if res.Results != 2 {
			t.Fatalf("%s: results %d", name, res.Results)
		}
		if o, r := mustGet(t, name).Outcome(res, 0); o != status.OutcomeFailed || r != status.ReasonProviderMultipleResults {
			t.Errorf("%s: two results: %s %s", name, o, r)
		}
	}
}

func TestCursorAttemptConfig(t *testing.T) {
	home := t.TempDir()
	user := filepath.Join(home, ".cursor")
	xdg := filepath.Join(home, ".config", "cursor")
	for _, d := range []string{user, xdg, filepath.Join(user, "projects")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	own := `{"version":1,"editor":{"vimMode":true},"permissions":{"allow":["Shell(ls)"],"deny":[]},"network":{"other":1}}`
	os.WriteFile(filepath.Join(user, CursorConfigFile), []byte(own), 0o600)
	os.WriteFile(filepath.Join(user, "mcp.json"), []byte(`{}`), 0o600)
	os.WriteFile(filepath.Join(xdg, "auth.json"), []byte(`{"token":"t"}`), 0o600)
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	dir := filepath.Join(t.TempDir(), "cursor-config")
	got, err := cursor{}.attemptConfig(dir, PrepareInput{Sandboxed: true, Network: "allowlist"}, home, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "CURSOR_CONFIG_DIR="+dir+" CURSOR_DATA_DIR="+user {
		t.Fatalf("env %q", got)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, CursorConfigFile))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	netw := cfg["network"].(map[string]any)
	if netw["useHttp1ForAgent"] != true || netw["other"] != float64(1) || cfg["editor"].(map[string]any)["vimMode"] != true {
		t.Fatalf("the copy keeps the user's settings and adds HTTP/1.1: %s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(user, CursorConfigFile)); string(b) != own {
		t.Fatalf("the user's own file changed: %s", b)
	}
	for _, n := range []string{"auth.json", "mcp.json", "projects"} {
		if target, err := os.Readlink(filepath.Join(dir, n)); err != nil || !strings.HasPrefix(target, home) {
			t.Errorf("%s is not linked to the user's: %q %v", n, target, err)
		}
	}
	// Open network: no HTTP/1.1 setting. A fresh HOME: nothing of the user's.
	dir2 := filepath.Join(t.TempDir(), "c")
	got, err = cursor{}.attemptConfig(dir2, PrepareInput{Sandboxed: true, Network: "open", FreshHome: true}, home, getenv)
	if err != nil || len(got) != 1 {
		t.Fatalf("fresh HOME: %q %v", got, err)
	}
	b, _ = os.ReadFile(filepath.Join(dir2, CursorConfigFile))
	if strings.Contains(string(b), "useHttp1ForAgent") || strings.Contains(string(b), "vimMode") {
		t.Fatalf("fresh HOME, open network: %s", b)
	}
	if _, err := os.Lstat(filepath.Join(dir2, "auth.json")); err == nil {
		t.Fatal("fresh HOME links the user's login")
	}
	// CURSOR_CONFIG_DIR and CURSOR_DATA_DIR of the user's are followed.
	env["CURSOR_CONFIG_DIR"], env["CURSOR_DATA_DIR"] = xdg, filepath.Join(home, "data")
	got, _ = cursor{}.attemptConfig(filepath.Join(t.TempDir(), "d"), PrepareInput{Sandboxed: true, Network: "allowlist"}, home, getenv)
	if !strings.Contains(strings.Join(got, " "), "CURSOR_DATA_DIR="+filepath.Join(home, "data")) {
		t.Fatalf("env %q", got)
	}
	lp := cursorSpec.LoginPaths(home, getenv)
	if strings.Join(lp, " ") != xdg+" "+filepath.Join(home, "data")+" "+xdg {
		t.Logf("login paths %q", lp)
	}
}
