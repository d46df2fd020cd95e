package providers

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/status"
)

func parse(t *testing.T, provider, stream string) (Result, []Event) {
	t.Helper()
	var evs []Event
	res := mustGet(t, provider).ParseStream(strings.NewReader(stream), func(e Event) { evs = append(evs, e) })
	return res, evs
}

// types lists the events' types without provider.usage (running totals,
// tested on their own).
func types(evs []Event) string {
	var s []string
	for _, e := range evs {
		if e.Type == EventUsage {
			continue
		}
		s = append(s, strings.TrimPrefix(e.Type, "provider."))
	}
	return strings.Join(s, ",")
}

const claudeToolStream = `{"type":"system","subtype":"init","cwd":"/w/app","session_id":"s-1","tools":["Bash","Write"],"model":"claude-sonnet-4-5","permissionMode":"bypassPermissions","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.332"}
{"type":"assistant","message":{"id":"m1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"I will write the file."},{"type":"tool_use","id":"toolu_1","name":"Write","input":{"file_path":"/w/app/PLAN.md","content":"# plan"}}]},"session_id":"s-1"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"File created successfully at: /w/app/PLAN.md"}]},"session_id":"s-1"}
{"type":"assistant","message":{"id":"m2","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"false"}}]},"session_id":"s-1"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_2","type":"tool_result","content":[{"type":"text","text":"Exit code 1"}],"is_error":true}]},"session_id":"s-1"}
{"type":"assistant","message":{"id":"m3","type":"message","role":"assistant","content":[{"type":"text","text":"Done."}]},"session_id":"s-1"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":5120,"duration_api_ms":4100,"num_turns":3,"result":"Done.","session_id":"s-1","total_cost_usd":0.0421,"usage":{"input_tokens":1200,"cache_creation_input_tokens":10,"cache_read_input_tokens":20,"output_tokens":300},"permission_denials":[]}
`

func TestClaudeParseTools(t *testing.T) {
	res, evs := parse(t, "claude-code", claudeToolStream)
	if got := types(evs); got != "init,text,tool,tool,tool,tool,text,result" {
		t.Fatalf("events %s", got)
	}
	init := evs[0].Data
	if init["session_id"] != "s-1" || init["model"] != "claude-sonnet-4-5" || init["permission_mode"] != "bypassPermissions" || init["version"] != "2.1.332" || init["tools"] != 2 {
		t.Fatalf("init %v", init)
	}
	if d := evs[2].Data; d["phase"] != "started" || d["name"] != "Write" || d["id"] != "toolu_1" || !strings.Contains(d["input"].(string), "PLAN.md") {
		t.Fatalf("tool started %v", d)
	}
	if d := evs[3].Data; d["phase"] != "completed" || d["name"] != "Write" || d["is_error"] != false {
		t.Fatalf("tool completed %v", d)
	}
	if d := evs[5].Data; d["name"] != "Bash" || d["is_error"] != true || d["output"] != "Exit code 1" {
		t.Fatalf("failed tool %v", d)
	}
	if !res.Seen || res.IsError || res.Turns != 3 || res.DurationMS != 5120 || res.DurationAPIMS != 4100 ||
		res.CostUSD == nil || *res.CostUSD != 0.0421 || res.Usage == nil || res.Usage.InputTokens != 1200 ||
		res.Usage.OutputTokens != 300 || res.Usage.CacheReadTokens != 20 || res.Usage.CacheWriteTokens != 10 || res.Usage.Turns != 3 || res.Usage.CostUSD == nil || res.SessionID != "s-1" ||
		res.Model != "claude-sonnet-4-5" || res.Text != "Done." || res.Tools != 2 || res.Lines != 7 || res.Malformed != 0 {
		t.Fatalf("result %+v", res)
	}
	rd := evs[len(evs)-1].Data
	if rd["turns"] != 3 || rd["cost_usd"] != 0.0421 || rd["is_error"] != false {
		t.Fatalf("result event %v", rd)
	}
	// Events must serialise: the engine writes them as JSON lines.
	for _, e := range evs {
		if _, err := json.Marshal(e.Data); err != nil {
			t.Fatalf("event %s does not marshal: %v", e.Type, err)
		}
	}
}

func TestClaudeRealStreams(t *testing.T) {
	// Captured from Claude Code 2.1.332 (npm) against a local fake Messages
	// API, and with no login at all.
	b, err := os.ReadFile("testdata/claude-2.1.332-fakeapi.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, evs := parse(t, "claude-code", string(b))
	if !res.Seen || res.IsError || res.Turns != 1 || res.SessionID == "" || res.Text != "hello from fake" || res.CostUSD == nil || res.Model == "" {
		t.Fatalf("result %+v", res)
	}
	if types(evs) != "init,text,result" {
		t.Fatalf("events %s", types(evs))
	}
	if o, r := mustGet(t, "claude-code").Outcome(res, 0); o != status.OutcomePassed || r != status.ReasonNone {
		t.Fatalf("outcome %s %s", o, r)
	}

	b, err = os.ReadFile("testdata/claude-2.1.332-not-logged-in.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, _ = parse(t, "claude-code", string(b))
	if !res.Seen || !res.IsError || !strings.Contains(res.Text, "Not logged in") {
		t.Fatalf("not-logged-in result %+v", res)
	}
	for _, code := range []int{0, 1} {
		if o, r := mustGet(t, "claude-code").Outcome(res, code); o != status.OutcomeFailed || r != status.ReasonProviderError {
			t.Fatalf("not logged in, exit %d: outcome %s %s", code, o, r)
		}
	}
}

const cursorStream = `{"type":"system","subtype":"init","apiKeySource":"env","cwd":"/w/app","session_id":"c-1","model":"Claude 4.5 Sonnet","permissionMode":"default"}
{"type":"user","message":{"role":"user","content":[{"type":"text","text":"write PLAN.md"}]},"session_id":"c-1"}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Writing the plan."}]},"session_id":"c-1"}
{"type":"tool_call","subtype":"started","call_id":"call_1","tool_call":{"writeToolCall":{"args":{"path":"PLAN.md","fileText":"# plan"}}},"session_id":"c-1"}
{"type":"tool_call","subtype":"completed","call_id":"call_1","tool_call":{"writeToolCall":{"args":{"path":"PLAN.md","fileText":"# plan"},"result":{"success":{"path":"/w/app/PLAN.md","linesCreated":1,"fileSize":6}}}},"session_id":"c-1"}
{"type":"tool_call","subtype":"started","call_id":"call_2","tool_call":{"function":{"name":"mcp_search","arguments":"{\"q\":\"x\"}"}},"session_id":"c-1"}
{"type":"tool_call","subtype":"completed","call_id":"call_2","tool_call":{"function":{"name":"mcp_search","result":{"error":{"message":"denied"}}}},"session_id":"c-1"}
{"type":"result","subtype":"success","duration_ms":4200,"duration_api_ms":4200,"is_error":false,"result":"Writing the plan.","session_id":"c-1","request_id":"r-1"}
`

func TestCursorParse(t *testing.T) {
	res, evs := parse(t, "cursor", cursorStream)
	if got := types(evs); got != "init,text,tool,tool,tool,tool,result" {
		t.Fatalf("events %s", got)
	}
	if d := evs[0].Data; d["session_id"] != "c-1" || d["model"] != "Claude 4.5 Sonnet" || d["api_key_source"] != "env" {
		t.Fatalf("init %v", d)
	}
	if d := evs[2].Data; d["name"] != "write" || d["phase"] != "started" || !strings.Contains(d["input"].(string), "PLAN.md") {
		t.Fatalf("tool started %v", d)
	}
	if d := evs[3].Data; d["is_error"] != false || d["phase"] != "completed" {
		t.Fatalf("tool completed %v", d)
	}
	if d := evs[4].Data; d["name"] != "mcp_search" || !strings.Contains(d["input"].(string), `"q"`) {
		t.Fatalf("function tool %v", d)
	}
	if d := evs[5].Data; d["is_error"] != true {
		t.Fatalf("failed tool %v", d)
	}
	if !res.Seen || res.IsError || res.DurationMS != 4200 || res.SessionID != "c-1" || res.Tools != 2 || res.CostUSD != nil || res.Usage != nil {
		t.Fatalf("result %+v", res)
	}
}

func TestOutcome(t *testing.T) {
	ok := Result{Seen: true}
	bad := Result{Seen: true, IsError: true}
	tests := []struct {
		res    Result
		code   int
		out    status.Outcome
		reason status.Reason
	}{
		{ok, 0, status.OutcomePassed, status.ReasonNone},
		{bad, 0, status.OutcomeFailed, status.ReasonProviderError},
		{bad, 1, status.OutcomeFailed, status.ReasonProviderError},
		{ok, 1, status.OutcomeFailed, status.ReasonProviderExitLied},
		{ok, 137, status.OutcomeFailed, status.ReasonProviderExitLied},
		{Result{}, 0, status.OutcomeFailed, status.ReasonProviderNoResult},
		{Result{}, 2, status.OutcomeFailed, status.ReasonProviderNoResult},
	}
	for _, name := range Names() {
		for _, tc := range tests {
			o, r := mustGet(t, name).Outcome(tc.res, tc.code)
			if o != tc.out || r != tc.reason {
				t.Errorf("%s: %+v exit %d: got %s %s, want %s %s", name, tc.res, tc.code, o, r, tc.out, tc.reason)
			}
		}
	}
}

func TestErrorResults(t *testing.T) {
	// A rate limit: exit 0, success subtype, but is_error.
	res, _ := parse(t, "claude-code", `{"type":"result","subtype":"success","is_error":true,"result":"API Error: 429 rate_limit_error","num_turns":1}`)
	if !res.IsError {
		t.Fatal("is_error ignored")
	}
	res, _ = parse(t, "claude-code", `{"type":"result","subtype":"error_max_turns","num_turns":30}`)
	if !res.IsError || res.Turns != 30 {
		t.Fatalf("error subtype: %+v", res)
	}
	res, _ = parse(t, "cursor", `{"type":"result","subtype":"error","result":"boom"}`)
	if !res.IsError {
		t.Fatal("cursor error subtype ignored")
	}
}

func TestParseMalformed(t *testing.T) {
	stream := "not json\n{\"type\":\"result\",\n[1,2]\n\n{\"type\":\"assistant\",\"message\":\"oops\"}\n" +
		`{"type":"user","message":{"content":[{"type":"tool_result","content":{"weird":true}}]}}` + "\n" +
		`{"type":"result","subtype":"success","is_error":"yes","num_turns":1e400,"duration_ms":-5,"total_cost_usd":"1"}` + "\n" +
		"{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":2}" // no final newline
	for _, name := range []string{"claude-code", "cursor"} { // the same shape; codex and gemini: their own tests
		res, _ := parse(t, name, stream)
		if !res.Seen || res.IsError || res.Malformed != 3 || res.Lines != 7 {
			t.Fatalf("%s: %+v", name, res)
		}
	}
}

func TestParseLongLinesAndTruncation(t *testing.T) {
	huge := strings.Repeat("é", EventTextLimit) // 2 bytes each: cut inside a rune
	line, _ := json.Marshal(map[string]any{"type": "assistant", "message": map[string]any{"content": []any{map[string]any{"type": "text", "text": huge}}}})
	over := bytes.Repeat([]byte("x"), MaxLineBytes+10)
	stream := string(line) + "\n" + string(over) + "\n" + `{"type":"result","subtype":"success","is_error":false,"result":"` + strings.Repeat("r", ResultTextLimit+50) + `"}` + "\n"
	res, evs := parse(t, "claude-code", stream)
	if res.Malformed != 1 || !res.Seen || len(res.Text) != ResultTextLimit {
		t.Fatalf("result %+v (text %d bytes)", res, len(res.Text))
	}
	d := evs[0].Data
	txt := d["text"].(string)
	if d["truncated"] != true || len(txt) > EventTextLimit || !strings.HasPrefix(huge, txt) || d["bytes"] != len(huge) {
		t.Fatalf("text event not truncated at a rune boundary: %d bytes", len(txt))
	}
	if rd := evs[1].Data; rd["truncated"] != true || len(rd["text"].(string)) != EventTextLimit {
		t.Fatalf("result event text not truncated")
	}
}

func FuzzParseStream(f *testing.F) {
	f.Add([]byte(claudeToolStream))
	f.Add([]byte(cursorStream))
	f.Add([]byte("{\"type\":\"result\"}\n\x00\xff{"))
	f.Add([]byte(`{"type":"tool_call","subtype":"completed","tool_call":{"a":1,"bToolCall":{"result":null}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range Names() {
			p, _ := Get(name)
			var n int
			res := p.ParseStream(bytes.NewReader(data), func(e Event) {
				n++
				if _, err := json.Marshal(e.Data); err != nil {
					t.Fatalf("%s: event does not marshal: %v", name, err)
				}
			})
			if res.Malformed > res.Lines || len(res.Text) > ResultTextLimit {
				t.Fatalf("%s: inconsistent result %+v", name, res)
			}
			p.Outcome(res, 0)
		}
	})
}

func TestClaudeRetryEvents(t *testing.T) {
	// Shape printed by Claude Code 2.1.332 while it retries a refused key.
	stream := `{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":520,"error_status":401,"error":"authentication_failed","session_id":"s"}
{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"retry_delay_ms":1100,"error_status":401,"error":"authentication_failed","session_id":"s"}
{"type":"result","subtype":"success","is_error":true,"result":"Invalid API key","terminal_reason":"api_error","session_id":"s"}`
	res, evs := parse(t, "claude-code", stream)
	if types(evs) != "retry,retry,result" || res.Retries != 2 || !res.IsError {
		t.Fatalf("events %s result %+v", types(evs), res)
	}
	if d := evs[1].Data; d["attempt"] != int64(2) || d["status"] != int64(401) || d["delay_ms"] != int64(1100) || d["error"] != "authentication_failed" {
		t.Fatalf("retry event %v", d)
	}
	if evs[2].Data["terminal_reason"] != "api_error" {
		t.Fatalf("result event %v", evs[2].Data)
	}
}

// BenchmarkParseStream measures parsing a long Claude Code session (tool
// calls, results, texts) from memory; b.SetBytes makes it report MB/s.
func BenchmarkParseStream(b *testing.B) {
	lines := strings.SplitAfter(claudeToolStream, "\n")
	var sb strings.Builder
	for i := 0; i < 500; i++ {
		for _, l := range lines[1:6] {
			sb.WriteString(l)
		}
	}
	sb.WriteString(lines[6])
	stream := sb.String()
	p := claudeCode{}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		p.ParseStream(strings.NewReader(stream), func(Event) {})
	}
}
