package chainlog

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Result is what Verify found. On a break it describes the lines before the
// break.
type Result struct {
	Lines   int // intact lines: records and seals
	Records int
	Seals   int
	Sealed  int  // lines covered by the last valid seal, that seal included
	Final   bool // the last line is the final seal Close writes
	KeyID   string
	// Binding is what the log's opening seal says it is.
	Binding Binding
	// Recovered lists the recovered markers: where a writer died and a
	// later kusaw continued the log.
	Recovered []Recovery
	// SealLines names every seal, in order.
	SealLines []SealRef
}

// Unsealed is the number of lines after the last seal: chained, but not
// (yet) signed.
func (r Result) Unsealed() int { return r.Lines - r.Sealed }

// Recovery is one recovered marker: where a writer died, the lines it left
// that no seal signed (From..To when Unsealed > 0), and the size of a torn
// line recovery cut off.
type Recovery struct {
	Line         int // the marker's line
	Unsealed     int
	From, To     int
	DroppedBytes int
}

// LastSeal names the last seal of the log; zero when it has none.
func (r Result) LastSeal() SealRef {
	if len(r.SealLines) == 0 {
		return SealRef{}
	}
	return r.SealLines[len(r.SealLines)-1]
}

// HasSeal reports whether the log holds the seal ref names.
func (r Result) HasSeal(ref SealRef) bool {
	for _, s := range r.SealLines {
		if s == ref {
			return true
		}
	}
	return false
}

// BreakError names the first line at which a log stops verifying.
type BreakError struct {
	Line   int    // 1-based
	Reason string // what is wrong, for a person
	Torn   bool   // the line is an incomplete last line (no newline)
}

func (e *BreakError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Verify reads a log and checks its chain and signatures against pub, the
// factory's public key, and its binding against expect (when expect.Run is
// empty, against what the log's first line says it is). It returns an error
// (a *BreakError for a broken log) naming the first line where the log
// breaks; the Result then covers the lines before it. A log that is not
// closed verifies without error: the caller reports Result.Final.
func Verify(r io.Reader, pub ed25519.PublicKey, expect Binding) (Result, error) {
	if len(pub) != ed25519.PublicKeySize {
		return Result{}, errors.New("chainlog: invalid ed25519 public key")
	}
	return newVerifier(pub, expect).run(r)
}

type verifier struct {
	pub      ed25519.PublicKey
	keyID    string
	expect   Binding
	prev     string
	prevSeal string
	goodEnd  int64 // byte offset just after the last intact line
	res      Result
}

func newVerifier(pub ed25519.PublicKey, expect Binding) *verifier {
	id := KeyID(pub)
	return &verifier{pub: pub, keyID: id, expect: expect, prev: Genesis, prevSeal: Genesis, res: Result{KeyID: id}}
}

func (v *verifier) run(r io.Reader) (Result, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if err == io.EOF && len(line) == 0 {
			return v.res, nil
		}
		if errors.Is(err, errLineTooLong) {
			return v.res, &BreakError{Line: n, Reason: fmt.Sprintf("longer than %d bytes", MaxLineBytes)}
		}
		if err == io.EOF {
			return v.res, &BreakError{Line: n, Torn: true, Reason: "truncated: the last line has no newline (the file was cut mid-line)"}
		}
		if err != nil {
			return v.res, fmt.Errorf("chainlog: read: %w", err)
		}
		if err := v.line(n, line); err != nil {
			return v.res, err
		}
		v.goodEnd += int64(len(line)) + 1
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns one line without its newline; io.EOF with a non-empty
// line means the line had no newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > MaxLineBytes {
			return nil, errLineTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return buf, err
		}
		return buf[:len(buf)-1], nil
	}
}

func (v *verifier) line(n int, line []byte) error {
	brk := func(format string, args ...any) error {
		return &BreakError{Line: n, Reason: fmt.Sprintf(format, args...)}
	}
	prevLine := "the start of the log"
	if n > 1 {
		prevLine = fmt.Sprintf("line %d", n-1)
	}
	if IsSeal(line) {
		return v.seal(n, line, prevLine, brk)
	}
	if n == 1 {
		return brk("the log does not start with its opening seal (it was not written by this version of kusaw, or was replaced)")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(line, &top); err != nil {
		return brk("not a JSON object (%v)", err)
	}
	raw, ok := top["prev"]
	if !ok {
		return brk("no prev field (the line was not written by kusaw, or was rewritten)")
	}
	var prev string
	if err := json.Unmarshal(raw, &prev); err != nil {
		return brk("prev is not a string")
	}
	if prev != v.prev {
		return brk("prev does not match %s (that line was edited, or lines were removed, inserted or reordered)", prevLine)
	}
	v.advance(line)
	v.res.Records++
	v.res.Final = false
	return nil
}

func (v *verifier) seal(n int, line []byte, prevLine string, brk func(string, ...any) error) error {
	var top sealLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&top); err != nil {
		return brk("malformed seal (%v)", err)
	}
	s := top.Seal
	// Only the exact bytes kusaw writes are accepted, so no byte of a seal
	// line can change unnoticed (JSON spacing, key order, base64 padding
	// bits would otherwise be free to vary).
	if canon, err := json.Marshal(sealLine{s}); err != nil || !bytes.Equal(canon, line) {
		return brk("seal line is not in kusaw's exact form (it was altered)")
	}
	if s.Key != v.keyID {
		return brk("seal was made with key %s, not with the factory's key %s", s.Key, v.keyID)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(s.Sig)
	if err != nil || !ed25519.Verify(v.pub, sealMessage(&s), sig) {
		return brk("seal signature is not valid (a forged or altered seal)")
	}
	if n == 1 {
		if s.Mark != markOpen {
			return brk("the log does not start with its opening seal")
		}
		b, err := ParseOf(s.Of, s.Kind)
		if err != nil || (s.Kind != KindEvents && s.Kind != KindEgress) {
			return brk("the opening seal names no valid place (%q, %q)", s.Of, s.Kind)
		}
		if v.expect.Run != "" && b != v.expect {
			return brk("this log is the %s, not the %s (a log copied from another place)", b, v.expect)
		}
		v.res.Binding = b
	} else {
		if s.Mark == markOpen {
			return brk("an opening seal after line 1 (logs were joined)")
		}
		if s.Of != v.res.Binding.Of() || s.Kind != v.res.Binding.Kind {
			return brk("seal is for the %s log of %s, but the log is the %s (lines from another log)", s.Kind, s.Of, v.res.Binding)
		}
	}
	if s.N != n-1 {
		return brk("seal counts %d lines before it, but it is line %d (lines were removed or inserted)", s.N, n)
	}
	if s.Hash != v.prev {
		return brk("seal does not match %s (that line was edited, or lines were removed, inserted or reordered)", prevLine)
	}
	if s.PrevSeal != v.prevSeal {
		return brk("seal does not follow the seal before it (seals were removed or moved)")
	}
	if (s.Mark == markRecovered) != (s.Unsealed != nil) || s.Mark != markRecovered && s.DroppedBytes != 0 {
		return brk("seal fields do not fit its mark %q", s.Mark)
	}
	switch s.Mark {
	case markFinal, markOpen:
	case markSeal:
	case markRecovered:
		found := n - 1 - v.res.Sealed
		if *s.Unsealed != found {
			return brk("recovered marker names %d unsealed lines, but %d come after the last seal", *s.Unsealed, found)
		}
		v.res.Recovered = append(v.res.Recovered, Recovery{Line: n, Unsealed: found, From: v.res.Sealed + 1, To: n - 1, DroppedBytes: s.DroppedBytes})
	default:
		return brk("unknown seal mark %q", s.Mark)
	}
	v.advance(line)
	v.prevSeal = v.prev
	v.res.Seals++
	v.res.Sealed = v.res.Lines
	v.res.SealLines = append(v.res.SealLines, SealRef{Line: n, Hash: v.prev})
	v.res.Final = s.Mark == markFinal
	return nil
}

func (v *verifier) advance(line []byte) {
	sum := sha256.Sum256(line)
	v.prev = hex.EncodeToString(sum[:])
	v.res.Lines++
}

// VerifyFile is Verify on the file at path.
func VerifyFile(path string, pub ed25519.PublicKey, expect Binding) (Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	return Verify(f, pub, expect)
}

// IsSeal reports whether a line (with or without its newline) is a seal
// rather than a record, for readers that show records and skip seals.
func IsSeal(line []byte) bool { return bytes.HasPrefix(line, []byte(`{"seal":`)) }
