package providers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"unicode/utf8"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// eachLine calls fn with every line of r (without its newline). Lines over
// MaxLineBytes are reported to tooLong and not kept in memory.
func eachLine(r io.Reader, fn func(line []byte), tooLong func()) {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	skipping := false
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			switch {
			case skipping:
			case len(buf)+len(chunk) > MaxLineBytes:
				skipping = true
				buf = buf[:0]
			default:
				buf = append(buf, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(chunk) > 0 || len(buf) > 0 || skipping {
			if skipping {
				tooLong()
			} else if line := bytes.TrimRight(buf, "\r\n"); len(line) > 0 {
				fn(line)
			}
		}
		buf = buf[:0]
		skipping = false
		if err != nil {
			return
		}
	}
}

// obj decodes one JSON object line; nil when the line is not one.
func obj(line []byte) map[string]any {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil
	}
	return m
}

// truncate cuts s to at most n bytes at a rune boundary.
func truncate(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}

// textData is the data of a provider.text event: the text cut to
// EventTextLimit, with its full length.
func textData(text string) map[string]any {
	t, cut := truncate(text, EventTextLimit)
	d := map[string]any{"text": t, "bytes": len(text)}
	if cut {
		d["truncated"] = true
	}
	return d
}

// brief renders a tool's input or output for an event: compact JSON or
// the string itself, cut to EventTextLimit.
func brief(v any) (string, bool) {
	var s string
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		s = x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return "", false
		}
		s = string(b)
	}
	return truncate(s, EventTextLimit)
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func sub(m map[string]any, k string) map[string]any {
	s, _ := m[k].(map[string]any)
	return s
}

func boolean(m map[string]any, k string) bool {
	b, _ := m[k].(bool)
	return b
}

// integer reads a JSON number as int64; false when absent or not a finite
// number in range.
func integer(m map[string]any, k string) (int64, bool) {
	n, ok := m[k].(json.Number)
	if !ok {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f > math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

func float(m map[string]any, k string) (float64, bool) {
	n, ok := m[k].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// resultText stores the final text of a result, cut to ResultTextLimit.
func resultText(s string) string {
	t, _ := truncate(s, ResultTextLimit)
	return t
}

// outcome is the rule both providers share: the result event decides, the
// exit code can only make a success fail.
func outcome(res Result, exitCode int) (status.Outcome, status.Reason) {
	switch {
	case !res.Seen:
		return status.OutcomeFailed, status.ReasonProviderNoResult
	case res.Results > 1:
		return status.OutcomeFailed, status.ReasonProviderMultipleResults
	case LimitSubtypes[res.Subtype] != "":
		// The CLI stopped itself at a limit kusaw passed (or the user's
		// args set): the same reason as when kusaw stops it.
		return status.OutcomeFailed, status.ReasonLimitReached
	case res.IsError:
		return status.OutcomeFailed, status.ReasonProviderError
	case exitCode != 0:
		return status.OutcomeFailed, status.ReasonProviderExitLied
	default:
		return status.OutcomePassed, status.ReasonNone
	}
}

// LimitSubtypes maps the result subtypes of a CLI that stopped itself at
// a limit to the limit's name in limits:.
var LimitSubtypes = map[string]string{
	"error_max_turns":      "turns",
	"error_max_budget_usd": "cost_usd",
}

// tally keeps a stream's running usage, one entry per API message: Claude
// Code repeats a message's usage on each of its content blocks, and the
// last copy counts.
type tally struct {
	msgs map[string]record.Usage
	sum  record.Usage
	seen bool
}

// message records message id's usage; it reports whether the totals
// changed.
func (t *tally) message(id string, u record.Usage) bool {
	if t.msgs == nil {
		t.msgs = map[string]record.Usage{}
	}
	old, had := t.msgs[id]
	if had && old.InputTokens == u.InputTokens && old.OutputTokens == u.OutputTokens &&
		old.CacheReadTokens == u.CacheReadTokens && old.CacheWriteTokens == u.CacheWriteTokens {
		return false
	}
	t.msgs[id] = u
	t.sum.InputTokens += u.InputTokens - old.InputTokens
	t.sum.OutputTokens += u.OutputTokens - old.OutputTokens
	t.sum.CacheReadTokens += u.CacheReadTokens - old.CacheReadTokens
	t.sum.CacheWriteTokens += u.CacheWriteTokens - old.CacheWriteTokens
	t.sum.Turns = len(t.msgs)
	t.seen = true
	return true
}

// usage is a copy of the totals; nil when no message reported any.
func (t *tally) usage() *record.Usage {
	if !t.seen {
		return nil
	}
	u := t.sum
	return &u
}

// usageData is the data of a provider.usage event: the running totals.
func usageData(u *record.Usage) map[string]any {
	if u == nil {
		return nil
	}
	d := map[string]any{"tokens": u.Tokens(), "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens}
	if u.Turns > 0 {
		d["turns"] = u.Turns
	}
	if u.CostUSD != nil {
		d["cost_usd"] = *u.CostUSD
	}
	return d
}

// tokens reads a usage object's counts under the given key names
// (input, output, cache read, cache write); false when none is there.
func tokens(m map[string]any, in, out, read, write string) (record.Usage, bool) {
	var u record.Usage
	var ok [4]bool
	u.InputTokens, ok[0] = integer(m, in)
	u.OutputTokens, ok[1] = integer(m, out)
	u.CacheReadTokens, ok[2] = integer(m, read)
	u.CacheWriteTokens, ok[3] = integer(m, write)
	return u, ok[0] || ok[1] || ok[2] || ok[3]
}
