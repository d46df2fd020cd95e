package record

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"

	"github.com/kusaw/kusaw/config"
)

// Provider event types: an agent's stream as the providers package writes
// it into the attempt's events (providers.Event* are these).
const (
	EvProviderInit     = "provider.init"
	EvProviderText     = "provider.text"
	EvProviderThinking = "provider.thinking"
	EvProviderTool     = "provider.tool"
	EvProviderResult   = "provider.result"
	EvProviderRetry    = "provider.retry"
	EvProviderUsage    = "provider.usage"
)

// TranscriptEntry is one thing the agent did or said, in order. Kind is
// init, text, thinking, tool, retry or result; the other fields are those
// of that kind (the event's data, with a tool's start and end joined).
type TranscriptEntry struct {
	Kind string    `json:"kind"`
	TS   string    `json:"ts,omitempty"`
	Data EventData `json:"data"`
	// A tool call: its input when it started, its output when it ended.
	Tool *ToolCall `json:"tool,omitempty"`
}

// EventData is an event's data as recorded.
type EventData = map[string]any

// ToolCall is one tool call of a transcript.
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Input     string `json:"input,omitempty"`
	Output    string `json:"output,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`
	Done      bool   `json:"done"`
	Truncated bool   `json:"truncated,omitempty"`
	MCPServer string `json:"mcp_server,omitempty"`
}

// Transcript is an agent attempt's conversation rebuilt from its events:
// GET /v1/runs/{id}/attempts/{step}/{n}/transcript.
type Transcript struct {
	Provider string            `json:"provider,omitempty"`
	Prompt   string            `json:"prompt,omitempty"`
	Entries  []TranscriptEntry `json:"entries"`
	// Usage is the attempt's recorded usage, else the last running total
	// the stream reported (provider.usage); nil when none.
	Usage any `json:"usage,omitempty"`
	// Cut says the entries stop at MaxTranscriptEntries.
	Cut bool `json:"cut,omitempty"`
}

// MaxTranscriptEntries bounds a transcript; the whole stream stays in
// stdout.log.
const MaxTranscriptEntries = 5000

// BuildTranscript reads an attempt's events.jsonl and joins its provider
// events into a transcript. Lines that are not events (seal lines, a torn
// last line) are skipped.
func BuildTranscript(r io.Reader) Transcript {
	t := Transcript{Entries: []TranscriptEntry{}}
	open := map[string]int{} // tool call id → index of its entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"provider.`) {
			continue
		}
		var ev Event
		if json.Unmarshal(line, &ev) != nil || !strings.HasPrefix(ev.Type, "provider.") {
			continue
		}
		ts := ev.TS.Format("2006-01-02T15:04:05.000Z07:00")
		switch ev.Type {
		case EvProviderUsage:
			t.Usage = ev.Data
			continue
		case EvProviderTool:
			tc := toolFrom(ev.Data)
			if i, ok := open[tc.ID]; ok && tc.ID != "" && tc.Done {
				// The call's end joins its start.
				c := t.Entries[i].Tool
				c.Done, c.Output, c.IsError = true, tc.Output, tc.IsError
				c.Truncated = c.Truncated || tc.Truncated
				if c.Name == "" {
					c.Name = tc.Name
				}
				delete(open, tc.ID)
				continue
			}
			if len(t.Entries) >= MaxTranscriptEntries {
				t.Cut = true
				continue
			}
			if !tc.Done && tc.ID != "" {
				open[tc.ID] = len(t.Entries)
			}
			t.Entries = append(t.Entries, TranscriptEntry{Kind: "tool", TS: ts, Data: EventData{}, Tool: tc})
			continue
		}
		if len(t.Entries) >= MaxTranscriptEntries {
			t.Cut = true
			continue
		}
		kind := strings.TrimPrefix(ev.Type, "provider.")
		data := ev.Data
		if data == nil {
			data = EventData{}
		}
		if kind == "result" {
			if u, ok := data["usage"]; ok {
				t.Usage = u
			}
		}
		t.Entries = append(t.Entries, TranscriptEntry{Kind: kind, TS: ts, Data: data})
	}
	return t
}

func toolFrom(d map[string]any) *ToolCall {
	s := func(k string) string { v, _ := d[k].(string); return v }
	b := func(k string) bool { v, _ := d[k].(bool); return v }
	return &ToolCall{ID: s("id"), Name: s("name"), Input: s("input"), Output: s("output"), IsError: b("is_error"),
		Done: s("phase") == "completed", Truncated: b("truncated"), MCPServer: s("mcp_server")}
}

// AgentPrompt is the prompt an agent attempt's process was given: both
// providers end their argv with "--" and the prompt.
func AgentPrompt(a *AttemptRecord) string {
	if a == nil || a.Kind != config.KindAgent || len(a.Processes) == 0 {
		return ""
	}
	argv := a.Processes[0].Argv
	if n := len(argv); n >= 2 && argv[n-2] == "--" {
		return argv[n-1]
	}
	return ""
}
