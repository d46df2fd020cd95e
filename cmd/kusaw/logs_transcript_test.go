package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/record"
)

func transcriptOf(t *testing.T, evs ...map[string]any) record.Transcript {
	t.Helper()
	var b bytes.Buffer
	for i, d := range evs {
		typ := d["type"].(string)
		delete(d, "type")
		line, _ := json.Marshal(record.Event{Seq: int64(i + 1), Run: "r", Step: "s", Attempt: 1, Type: typ, Data: d})
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString(`{"seal":"not an event"}` + "\n")
	return record.BuildTranscript(&b)
}

func TestTextTranscript(t *testing.T) {
	long := strings.Repeat("x", 300)
	tr := transcriptOf(t,
		map[string]any{"type": "provider.init", "model": "claude-fake-1", "session_id": "s-1", "tools": 4, "version": "2.0.0"},
		map[string]any{"type": "provider.text", "text": "Looking at the tests.\nThen the code."},
		map[string]any{"type": "provider.tool", "phase": "started", "id": "t1", "name": "Bash", "input": `{"command":"go test ./...","description":"run the tests"}`},
		map[string]any{"type": "provider.tool", "phase": "completed", "id": "t1", "name": "Bash", "output": "ok  example.test/a\nok  example.test/b\n"},
		map[string]any{"type": "provider.tool", "phase": "started", "id": "t2", "name": "Read", "input": `{"file_path":"/w/` + long + `"}`},
		map[string]any{"type": "provider.tool", "phase": "completed", "id": "t2", "name": "Read", "output": "no such file", "is_error": true},
		map[string]any{"type": "provider.text", "text": "All done."},
		map[string]any{"type": "provider.result", "is_error": false, "subtype": "success", "turns": 3, "duration_ms": 1500, "text": "All done."},
	)
	var out bytes.Buffer
	p := &textTranscript{w: &out}
	at := &record.AttemptRecord{Step: "s", Number: 1, Provider: "claude-code"}
	p.Head(at, "== s attempt 1 transcript (claude-code) ==")
	for _, e := range tr.Entries {
		p.Entry(at, e, "")
	}
	cost := 0.0123
	p.End(at, &record.Usage{InputTokens: 1200, OutputTokens: 300, CostUSD: &cost, Turns: 3})
	got := out.String()
	want := `== s attempt 1 transcript (claude-code) ==
● started claude-code · version 2.0.0 · model claude-fake-1 · 4 tools · session s-1
  Looking at the tests.
  Then the code.
→ Bash  go test ./...
    ← ok  example.test/a…  (2 lines)
→ Read  /w/` + strings.Repeat("x", transcriptArgMax-3) + `…
    ✗ no such file
  All done.
✓ finished (success, 3 turns, 1.5s)
usage: $0.0123, 1.5k tokens (input 1.2k, output 300, cache read 0, cache write 0), 3 turns
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// The final message in full: the event holds its first bytes, the
// stream all of them.
func TestTranscriptFinalInFull(t *testing.T) {
	full := strings.Repeat("word ", 600) + "THE END"
	stream := `{"type":"system","subtype":"init"}` + "\n" + `{"type":"result","subtype":"success","result":` + mustJSON(full) + "}\n"
	if got := claudeFinal([]byte(stream)); got != full {
		t.Fatalf("claudeFinal: %d bytes, want %d", len(got), len(full))
	}
	tr := transcriptOf(t,
		map[string]any{"type": "provider.text", "text": full[:2000], "bytes": len(full)},
		map[string]any{"type": "provider.result", "is_error": true, "subtype": "error_max_turns", "text": full[:2000], "truncated": true})
	var out bytes.Buffer
	p := &textTranscript{w: &out}
	at := &record.AttemptRecord{Provider: "claude-code"}
	p.Entry(at, tr.Entries[0], "")
	p.Entry(at, tr.Entries[1], full)
	if !strings.Contains(out.String(), "✗ failed (error_max_turns)\n"+full+"\n") {
		t.Errorf("the final message is not there in full:\n%s", out.String())
	}
	// Without the stream, the cut is said.
	out.Reset()
	p.Entry(at, tr.Entries[1], "")
	if !strings.Contains(out.String(), "kusaw logs --raw shows the whole stream") {
		t.Errorf("a cut final message is not said to be cut:\n%s", out.String())
	}
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestJSONTranscript(t *testing.T) {
	tr := transcriptOf(t,
		map[string]any{"type": "provider.tool", "phase": "started", "id": "t1", "name": "Bash", "input": `{"command":"ls"}`},
		map[string]any{"type": "provider.tool", "phase": "completed", "id": "t1", "name": "Bash", "output": "a\n"})
	var out bytes.Buffer
	p := &jsonTranscript{w: &out}
	at := &record.AttemptRecord{Step: "s", Number: 2}
	p.Entry(at, tr.Entries[0], "")
	p.End(at, nil)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), out.String())
	}
	var l transcriptLine
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil || l.Kind != "tool" || l.Tool.Name != "Bash" || l.Tool.Output != "a\n" || l.Step != "s" || l.Attempt != 2 {
		t.Errorf("first line %s (%v)", lines[0], err)
	}
	if !strings.Contains(lines[1], `"kind":"usage"`) {
		t.Errorf("last line %s", lines[1])
	}
}

// The argument shown for a tool call: the one that says what it did.
func TestToolArg(t *testing.T) {
	for in, want := range map[string]string{
		`{"command":"go test ./...","description":"tests"}`:  "go test ./...",
		`{"command":["bash","-lc","ls -la"],"workdir":"/w"}`: "bash -lc ls -la", // Codex's argv
		`{"file_path":"/w/a.go","old_string":"x"}`:           "/w/a.go",
		`{"pattern":"TODO","path":"."}`:                      "TODO",
		`{"todos":[1,2]}`:                                    `{"todos":[1,2]}`,
		"not json\nsecond line":                              "not json…",
		`{"command":"echo one\necho two"}`:                   "echo one…",
	} {
		if got := toolArg(in); got != want {
			t.Errorf("toolArg(%s) = %q, want %q", in, got, want)
		}
	}
}
