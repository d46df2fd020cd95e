package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestTermSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n":           "plain text\n",
		"tab\tand crlf\r\n":      "tab\tand crlf\r\n",
		"\x1b]52;c;cHduZWQ=\x07": "^[]52;c;cHduZWQ=^G",
		"\x1b[2Jclear\rover":     "^[[2Jclear^Mover",
		"del\x7f nul\x00":        "del^? nul^@",
		"c1 \u009b31m csi":       "c1 <U+009B>31m csi",
		"bad \xff byte":          `bad \xff byte`,
		"unicode ok: héllo → ✓":  "unicode ok: héllo → ✓",
	} {
		if got := termSafe(in); got != want {
			t.Errorf("termSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// A character or a CR LF split across writes comes out whole.
func TestSafeWriterSplits(t *testing.T) {
	in := "héllo ✓ line\r\nnext \x1b[2J end"
	for split := 0; split <= len(in); split++ {
		var out bytes.Buffer
		w := &safeWriter{w: &out}
		w.Write([]byte(in[:split]))
		w.Write([]byte(in[split:]))
		w.Flush()
		if want := termSafe(in); out.String() != want {
			t.Fatalf("split at %d: %q, want %q", split, out.String(), want)
		}
		if strings.Contains(out.String(), "\x1b") {
			t.Fatalf("escape passed at split %d", split)
		}
	}
}
