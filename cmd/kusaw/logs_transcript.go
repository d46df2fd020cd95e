package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kusaw/kusaw/record"
)

// transcriptPrinter prints an agent attempt's transcript (rebuilt from its
// provider.* events, the same for every provider kusaw parses): text for a
// reader, or JSON lines with --json. kusaw logs decides what and when;
// a printer only shapes it.
type transcriptPrinter interface {
	// Head starts an attempt's transcript.
	Head(at *record.AttemptRecord, head string)
	// Entry is one thing the agent did or said, in order; final is the
	// whole final message when the event holds only its start.
	Entry(at *record.AttemptRecord, e record.TranscriptEntry, final string)
	// End closes an attempt's transcript with its usage (nil: not
	// reported).
	End(at *record.AttemptRecord, u *record.Usage)
}

// Lengths of what the text form shortens: a tool's argument and the first
// line of its result. The final message is never cut.
const (
	transcriptArgMax    = 100
	transcriptResultMax = 120
)

// textTranscript is the form for a terminal: one line per tool call with
// its name and a short argument, its result shortened under it, the
// agent's text as written, the final message in full, usage last.
type textTranscript struct {
	w io.Writer
	// lastText is the agent's last text shown: the final message is
	// usually the same words, shown once.
	lastText string
}

func (p *textTranscript) Head(at *record.AttemptRecord, head string) {
	fmt.Fprintln(p.w, head)
}

func (p *textTranscript) Entry(at *record.AttemptRecord, e record.TranscriptEntry, final string) {
	d := e.Data
	switch e.Kind {
	case "init":
		parts := []string{"started " + at.Provider}
		for _, k := range []string{"version", "model"} {
			if v := dataStr(d, k); v != "" {
				parts = append(parts, k+" "+v)
			}
		}
		if n, ok := d["tools"].(float64); ok {
			parts = append(parts, fmt.Sprintf("%d tools", int(n)))
		}
		if v := dataStr(d, "session_id"); v != "" {
			parts = append(parts, "session "+v)
		}
		fmt.Fprintf(p.w, "● %s\n", strings.Join(parts, " · "))
	case "text":
		p.lastText = strings.TrimRight(dataStr(d, "text"), "\n")
		text := p.lastText
		if n, ok := d["bytes"].(float64); ok && int(n) > len(dataStr(d, "text")) {
			text += "…"
		}
		fmt.Fprintf(p.w, "%s\n", indent(text, "  "))
	case "thinking":
		fmt.Fprintf(p.w, "  (thinking) %s\n", shortLine(dataStr(d, "text"), transcriptResultMax))
	case "retry":
		fmt.Fprintf(p.w, "  ! API call retried (%v of %v): %s\n", dataOr(d, "attempt", "?"), dataOr(d, "max_retries", "?"), shortLine(dataStr(d, "error"), transcriptResultMax))
	case "tool":
		p.tool(at, e.Tool)
	case "result":
		word, mark := "finished", "✓"
		if d["is_error"] == true {
			word, mark = "failed", "✗"
		}
		var facts []string
		if s := dataStr(d, "subtype"); s != "" {
			facts = append(facts, s)
		}
		if n, ok := d["turns"].(float64); ok {
			facts = append(facts, fmt.Sprintf("%d turns", int(n)))
		}
		if n, ok := d["duration_ms"].(float64); ok {
			facts = append(facts, fmt.Sprintf("%.1fs", n/1000))
		}
		line := mark + " " + word
		if len(facts) > 0 {
			line += " (" + strings.Join(facts, ", ") + ")"
		}
		fmt.Fprintln(p.w, line)
		text := final
		if text == "" {
			text = dataStr(d, "text")
			if d["truncated"] == true {
				text += "\n(cut by kusaw's events; kusaw logs --raw shows the whole stream)"
			}
		}
		if text = strings.TrimRight(text, "\n"); text != "" && text != p.lastText {
			fmt.Fprintln(p.w, text)
		}
	}
}

func (p *textTranscript) tool(at *record.AttemptRecord, t *record.ToolCall) {
	if t == nil {
		return
	}
	// Paths inside the attempt's worktrees as the reader knows them:
	// relative to the repository (with its name when there are several).
	in, out := t.Input, t.Output
	for _, w := range at.Worktrees {
		if w.Path == "" {
			continue
		}
		rel := ""
		if len(at.Worktrees) > 1 {
			rel = w.Repo + "/"
		}
		in = strings.ReplaceAll(in, w.Path+"/", rel)
		out = strings.ReplaceAll(out, w.Path+"/", rel)
	}
	name := t.Name
	if t.MCPServer != "" {
		name = t.MCPServer + "." + name
	}
	line := "→ " + name
	if arg := toolArg(in); arg != "" {
		line += "  " + arg
	}
	fmt.Fprintln(p.w, line)
	switch {
	case !t.Done:
		fmt.Fprintln(p.w, "    (no result)")
	case t.IsError:
		fmt.Fprintf(p.w, "    ✗ %s\n", resultSummary(out))
	default:
		fmt.Fprintf(p.w, "    ← %s\n", resultSummary(out))
	}
}

func (p *textTranscript) End(at *record.AttemptRecord, u *record.Usage) {
	fmt.Fprintf(p.w, "usage: %s\n", usageLine(u))
}

// jsonTranscript prints each entry as a JSON line naming its attempt, and
// a last line of kind "usage".
type jsonTranscript struct{ w io.Writer }

type transcriptLine struct {
	Step    string           `json:"step"`
	Attempt int              `json:"attempt"`
	Kind    string           `json:"kind"`
	TS      string           `json:"ts,omitempty"`
	Data    record.EventData `json:"data,omitempty"`
	Tool    *record.ToolCall `json:"tool,omitempty"`
	Final   string           `json:"final,omitempty"`
	Usage   *record.Usage    `json:"usage,omitempty"`
}

func (p *jsonTranscript) Head(at *record.AttemptRecord, head string) {}

func (p *jsonTranscript) Entry(at *record.AttemptRecord, e record.TranscriptEntry, final string) {
	p.line(transcriptLine{Step: at.Step, Attempt: at.Number, Kind: e.Kind, TS: e.TS, Data: e.Data, Tool: e.Tool, Final: final})
}

func (p *jsonTranscript) End(at *record.AttemptRecord, u *record.Usage) {
	p.line(transcriptLine{Step: at.Step, Attempt: at.Number, Kind: "usage", Usage: u})
}

func (p *jsonTranscript) line(l transcriptLine) {
	b, _ := json.Marshal(l)
	fmt.Fprintf(p.w, "%s\n", b)
}

// toolArg is the one argument worth a glance of a tool call's input (a
// JSON object as the providers record it): the command, the path, the
// pattern; else the input itself, shortened.
func toolArg(input string) string {
	var m map[string]any
	if json.Unmarshal([]byte(input), &m) == nil {
		for _, k := range []string{"command", "cmd", "file_path", "notebook_path", "pattern", "path", "url", "query", "prompt", "description"} {
			switch v := m[k].(type) {
			case string:
				return shortLine(v, transcriptArgMax)
			case []any: // codex's command is argv
				var parts []string
				for _, x := range v {
					parts = append(parts, fmt.Sprint(x))
				}
				return shortLine(strings.Join(parts, " "), transcriptArgMax)
			}
		}
	}
	return shortLine(input, transcriptArgMax)
}

// resultSummary is a tool's output shortened: its first line, and how
// many lines there were.
func resultSummary(out string) string {
	out = strings.TrimRight(out, "\n")
	if out == "" {
		return "(no output)"
	}
	s := shortLine(out, transcriptResultMax)
	if n := strings.Count(out, "\n") + 1; n > 1 {
		s += fmt.Sprintf("  (%d lines)", n)
	}
	return s
}

// shortLine is s's first non-empty line, cut to max runes with an ellipsis.
func shortLine(s string, max int) string {
	s = strings.TrimLeft(s, "\n ")
	cut := false
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, cut = s[:i], true
	}
	if r := []rune(s); len(r) > max {
		s, cut = string(r[:max]), true
	}
	if cut {
		s += "…"
	}
	return s
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(s, "\n", "\n"+pre)
}

func dataStr(d record.EventData, k string) string {
	v, _ := d[k].(string)
	return v
}

func dataOr(d record.EventData, k string, def any) any {
	if v, ok := d[k]; ok {
		return v
	}
	return def
}

// claudeFinal is the whole final message of Claude Code's stream-json
// (its last result line's "result"): the event kusaw records keeps only
// the first EventTextLimit bytes. Other providers' streams give "".
func claudeFinal(stream []byte) string {
	final := ""
	sc := bufio.NewScanner(bytes.NewReader(stream))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"result"`)) {
			continue
		}
		var m struct {
			Type   string `json:"type"`
			Result string `json:"result"`
		}
		if json.Unmarshal(line, &m) == nil && m.Type == "result" {
			final = m.Result
		}
	}
	return final
}
