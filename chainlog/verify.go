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
}

// Unsealed is the number of lines after the last seal: chained, but not
// signed.
func (r Result) Unsealed() int { return r.Lines - r.Sealed }

// BreakError names the first line at which a log stops verifying.
type BreakError struct {
	Line   int    // 1-based
	Reason string // what is wrong, for a person
	Torn   bool   // the line is an incomplete last line (no newline)
}

func (e *BreakError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Verify reads a log and checks its chain and seals against pub, the
// factory's public key. It returns an error (a *BreakError for a broken
// log) naming the first line where the log breaks; the Result then covers
// the lines before it. A log whose tail is unsealed verifies without error:
// the caller reports Result.Unsealed and Result.Final.
func Verify(r io.Reader, pub ed25519.PublicKey) (Result, error) {
	if len(pub) != ed25519.PublicKeySize {
		return Result{}, errors.New("chainlog: invalid ed25519 public key")
	}
	return newVerifier(pub).run(r)
}

type verifier struct {
	pub      ed25519.PublicKey
	keyID    string
	prev     string
	lastSeal bool
	goodEnd  int64 // byte offset just after the last intact line
	res      Result
}

func newVerifier(pub ed25519.PublicKey) *verifier {
	return &verifier{pub: pub, keyID: KeyID(pub), prev: Genesis, res: Result{KeyID: KeyID(pub)}}
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
	if len(line) == 0 || line[0] != '{' {
		return brk("not a JSON object")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(line, &top); err != nil {
		return brk("not a JSON object (%v)", err)
	}
	prevLine := "the start of the log"
	if n > 1 {
		prevLine = fmt.Sprintf("line %d", n-1)
	}
	if raw, ok := top["seal"]; ok {
		if len(top) != 1 {
			return brk("a seal line must hold only the seal")
		}
		var s seal
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return brk("malformed seal (%v)", err)
		}
		// Only the exact bytes kusaw writes are accepted, so no byte of a
		// seal line can change unnoticed (JSON spacing, key order, base64
		// padding bits would otherwise be free to vary).
		if canon, err := json.Marshal(sealLine{s}); err != nil || !bytes.Equal(canon, line) {
			return brk("seal line is not in kusaw's exact form (it was altered)")
		}
		if s.N != n-1 {
			return brk("seal counts %d lines before it, but it is line %d (lines were removed or inserted)", s.N, n)
		}
		if s.Hash != v.prev {
			return brk("seal does not match %s (that line was edited, or lines were removed, inserted or reordered)", prevLine)
		}
		if s.Key != v.keyID {
			return brk("seal was made with key %s, not with the factory's key %s", s.Key, v.keyID)
		}
		sig, err := base64.StdEncoding.Strict().DecodeString(s.Sig)
		if err != nil || !ed25519.Verify(v.pub, SignedMessage(s.N, s.Hash, s.Final), sig) {
			return brk("seal signature is not valid (a forged or altered seal)")
		}
		v.advance(line, true)
		v.res.Seals++
		v.res.Sealed = v.res.Lines
		v.res.Final = s.Final
		return nil
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
	v.advance(line, false)
	v.res.Records++
	v.res.Final = false
	return nil
}

func (v *verifier) advance(line []byte, isSeal bool) {
	sum := sha256.Sum256(line)
	v.prev = hex.EncodeToString(sum[:])
	v.lastSeal = isSeal
	v.res.Lines++
}

// VerifyFile is Verify on the file at path.
func VerifyFile(path string, pub ed25519.PublicKey) (Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	return Verify(f, pub)
}

// IsSeal reports whether a line (with or without its newline) is a seal
// rather than a record, for readers that show records and skip seals.
func IsSeal(line []byte) bool { return bytes.HasPrefix(line, []byte(`{"seal":`)) }
