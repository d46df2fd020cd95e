package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// A step's output, event data and file names reach the user's terminal
// through run, logs, show and sandbox exec. A step can write escape
// sequences (OSC 52 sets the clipboard, others retitle the window or move
// the cursor to hide lines), so whatever came from a step is printed with
// its control characters made visible when the output is a terminal.
// Files and pipes get the bytes as they are, and so does logs --raw.

// isTerminal reports a character device that is not TERM=dumb.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// termSafe makes control characters visible: ESC as ^[, other C0 controls
// in caret form, DEL as ^?, C1 controls as <U+009B>, bytes that are not
// UTF-8 as \xNN. Newlines and tabs stay; a carriage return stays only
// before a newline (alone it would let a line overwrite another).
func termSafe(s string) string {
	if !needsSafe(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r' && i+1 < len(s) && s[i+1] == '\n':
			b.WriteRune(r)
		case r < 0x20:
			b.WriteByte('^')
			b.WriteByte(byte(r) + '@')
		case r == 0x7f:
			b.WriteString("^?")
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, "<U+%04X>", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsSafe(s string) bool {
	high := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 && c != '\n' && c != '\t', c == 0x7f:
			return true
		case c >= 0x80:
			high = true
		}
	}
	return high && (!utf8.ValidString(s) || hasC1(s))
}

func hasC1(s string) bool {
	for _, r := range s {
		if r >= 0x80 && r < 0xa0 {
			return true
		}
	}
	return false
}

// safeWriter applies termSafe to a stream, holding back an incomplete
// UTF-8 sequence (and a lone carriage return) until the next write, so a
// character split between two reads is not mistaken for bad bytes.
type safeWriter struct {
	w       io.Writer
	pending []byte
}

func (s *safeWriter) Write(p []byte) (int, error) {
	buf := append(s.pending, p...)
	keep := 0
	for keep < len(buf) && keep < utf8.UTFMax-1 {
		i := len(buf) - 1 - keep
		c := buf[i]
		if c == '\r' && keep == 0 {
			keep = 1
			break
		}
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(buf[i:]) {
				keep = len(buf) - i
			}
			break
		}
		keep++
	}
	if keep > 0 && utf8.FullRune(buf[len(buf)-keep:]) && buf[len(buf)-1] != '\r' {
		keep = 0
	}
	out := buf[:len(buf)-keep]
	s.pending = append([]byte(nil), buf[len(buf)-keep:]...)
	if _, err := io.WriteString(s.w, termSafe(string(out))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what was held back.
func (s *safeWriter) Flush() error {
	if len(s.pending) == 0 {
		return nil
	}
	_, err := io.WriteString(s.w, termSafe(string(s.pending)))
	s.pending = nil
	return err
}

// forTerminal wraps w in a safeWriter when it is a terminal.
func forTerminal(w io.Writer) io.Writer {
	if isTerminal(w) {
		return &safeWriter{w: w}
	}
	return w
}

func flushSafe(w io.Writer) {
	if s, ok := w.(*safeWriter); ok {
		_ = s.Flush()
	}
}

// safeFor is termSafe(s) when w is a terminal, s otherwise.
func safeFor(w io.Writer, s string) string {
	if isTerminal(w) {
		return termSafe(s)
	}
	return s
}
