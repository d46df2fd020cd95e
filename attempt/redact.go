package attempt

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"sync"
)

// Redactor replaces secret values with <secret> wherever kusaw writes: logs,
// events, records. A step that prints its own token does not leak it into
// the run's files.
type Redactor struct {
	mu   sync.RWMutex
	vals []string // longest first, so a secret containing another is replaced whole
}

// minSecretLen: shorter values would garble unrelated text; config
// validation is the place to refuse secrets that short.
const minSecretLen = 4

// Add is a secret's value to replace from now on.
func (r *Redactor) Add(v string) {
	if len(v) < minSecretLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	forms := []string{v}
	if b, err := json.Marshal(v); err == nil {
		if e := string(b[1 : len(b)-1]); e != v {
			forms = append(forms, e) // as it appears inside JSON
		}
	}
	for _, f := range forms {
		dup := false
		for _, x := range r.vals {
			if x == f {
				dup = true
			}
		}
		if !dup {
			r.vals = append(r.vals, f)
		}
	}
	sort.Slice(r.vals, func(i, j int) bool { return len(r.vals[i]) > len(r.vals[j]) })
}

func (r *Redactor) list() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.vals
}

// String is s with the secrets replaced.
func (r *Redactor) String(s string) string {
	for _, v := range r.list() {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, SecretRedacted)
		}
	}
	return s
}

// Bytes is b with the secrets replaced.
func (r *Redactor) Bytes(b []byte) []byte {
	for _, v := range r.list() {
		if bytes.Contains(b, []byte(v)) {
			b = bytes.ReplaceAll(b, []byte(v), []byte(SecretRedacted))
		}
	}
	return b
}

func (r *Redactor) maxLen() int {
	m := 0
	for _, v := range r.list() {
		if len(v) > m {
			m = len(v)
		}
	}
	return m
}

// CopyRedacted copies src to dst replacing secrets, holding back enough of
// each chunk's tail that a secret split across two reads is still found.
// A complete line is never held back (unless a secret spans lines): an
// agent's result line must reach the stream parser while the agent still
// runs, or a CLI that does not exit after its result is never stopped.
func (r *Redactor) CopyRedacted(dst io.Writer, src io.Reader) error {
	keep := r.maxLen() - 1
	if keep <= 0 {
		_, err := io.Copy(dst, src)
		return err
	}
	multiLine := false
	for _, v := range r.list() {
		multiLine = multiLine || strings.ContainsAny(v, "\n")
	}
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, err := src.Read(buf)
		if n > 0 {
			pending = r.Bytes(append(pending, buf[:n]...))
			cut := len(pending) - keep
			if nl := bytes.LastIndexByte(pending, '\n'); !multiLine && nl+1 > cut {
				cut = nl + 1
			}
			if cut > 0 {
				if _, werr := dst.Write(pending[:cut]); werr != nil {
					return werr
				}
				pending = append([]byte{}, pending[cut:]...)
			}
		}
		if err != nil {
			if len(pending) > 0 {
				if _, werr := dst.Write(r.Bytes(pending)); werr != nil {
					return werr
				}
			}
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
