package chainlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

type event struct {
	Seq  int    `json:"seq"`
	Type string `json:"type"`
	Data any    `json:"data,omitempty"`
}

// sample writes n records with a seal every 3 lines and closes the log:
// r1 r2 r3 S r4 r5 r6 S r7 r8 r9 S r10 F for n = 10.
func sample(t testing.TB, key ed25519.PrivateKey, n int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := Create(path, key, Options{SealEvery: 3, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := w.Append(event{Seq: i, Type: "step.started", Data: map[string]any{"i": i, "s": "x<y>&\u2028"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func splitLines(b []byte) [][]byte {
	ls := bytes.SplitAfter(b, []byte("\n"))
	if len(ls) > 0 && len(ls[len(ls)-1]) == 0 {
		ls = ls[:len(ls)-1]
	}
	return ls
}

func join(ls [][]byte) []byte { return bytes.Join(ls, nil) }

func TestRoundTrip(t *testing.T) {
	key := newKey(t)
	b := sample(t, key, 10)
	res, err := Verify(bytes.NewReader(b), pubOf(key))
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Lines: 14, Records: 10, Seals: 4, Sealed: 14, Final: true, KeyID: KeyID(pubOf(key))}
	if res != want {
		t.Fatalf("Verify = %+v, want %+v", res, want)
	}
	ls := splitLines(b)
	var first map[string]any
	if err := json.Unmarshal(ls[0], &first); err != nil {
		t.Fatal(err)
	}
	if first["prev"] != Genesis || first["type"] != "step.started" || first["seq"] != 1.0 {
		t.Fatalf("first line %s", ls[0])
	}
	if !bytes.HasPrefix(ls[0], []byte(`{"prev":"`)) {
		t.Errorf("prev is not the first field: %s", ls[0])
	}
	if !bytes.HasPrefix(ls[3], []byte(`{"seal":{"n":3,"hash":"`)) || !bytes.HasPrefix(ls[13], []byte(`{"seal":{"n":13,`)) || !bytes.Contains(ls[13], []byte(`"final":true`)) {
		t.Errorf("seals: %s %s", ls[3], ls[13])
	}
}

// Each way of tampering is caught at the right line; a log that only lost
// its tail verifies up to its last seal and says so.
func TestTampering(t *testing.T) {
	key := newKey(t)
	pub := pubOf(key)
	orig := splitLines(sample(t, key, 10)) // 14 lines, seals at 4, 8, 12, 14
	other := newKey(t)

	edit := func(i int, from, to string) func([][]byte) [][]byte {
		return func(ls [][]byte) [][]byte {
			ls[i-1] = bytes.Replace(ls[i-1], []byte(from), []byte(to), 1)
			return ls
		}
	}
	remove := func(i int) func([][]byte) [][]byte {
		return func(ls [][]byte) [][]byte { return append(ls[:i-1:i-1], ls[i:]...) }
	}
	resealWith := func(k ed25519.PrivateKey, keyID string, final bool) func([][]byte) [][]byte {
		return func(ls [][]byte) [][]byte {
			var s sealLine
			_ = json.Unmarshal(ls[13], &s)
			s.Seal.Final = final
			s.Seal.Key = keyID
			s.Seal.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(k, SignedMessage(s.Seal.N, s.Seal.Hash, final)))
			b, _ := json.Marshal(s)
			ls[13] = append(b, '\n')
			return ls
		}
	}
	cases := []struct {
		name     string
		mutate   func([][]byte) [][]byte
		breakAt  int    // 0: no error
		reason   string // part of the error
		sealed   int    // Result.Sealed
		lines    int
		final    bool
		wantTorn bool
	}{
		{name: "edited record", mutate: edit(2, `"i":2`, `"i":3`), breakAt: 3, reason: "prev does not match line 2 (that line was edited", sealed: 0},
		{name: "edited last record before final seal", mutate: edit(13, `"i":10`, `"i":11`), breakAt: 14, reason: "seal does not match line 13", sealed: 12},
		{name: "removed record", mutate: remove(5), breakAt: 5, reason: "prev does not match", sealed: 4},
		{name: "removed seal", mutate: remove(4), breakAt: 4, reason: "prev does not match", sealed: 0},
		{name: "reordered", mutate: func(ls [][]byte) [][]byte { ls[4], ls[5] = ls[5], ls[4]; return ls }, breakAt: 5, sealed: 4},
		{name: "inserted copy", mutate: func(ls [][]byte) [][]byte {
			return append(ls[:2:2], append([][]byte{ls[1]}, ls[2:]...)...)
		}, breakAt: 3, sealed: 0},
		{name: "duplicated seal", mutate: func(ls [][]byte) [][]byte {
			return append(ls[:4:4], append([][]byte{ls[3]}, ls[4:]...)...)
		}, breakAt: 5, reason: "seal counts 3 lines", sealed: 4},
		{name: "blank line", mutate: func(ls [][]byte) [][]byte {
			return append(ls[:6:6], append([][]byte{[]byte("\n")}, ls[6:]...)...)
		}, breakAt: 7, reason: "not a JSON object", sealed: 4},
		{name: "CRLF", mutate: func(ls [][]byte) [][]byte {
			for i := range ls {
				ls[i] = append(bytes.TrimSuffix(ls[i], []byte("\n")), '\r', '\n')
			}
			return ls
		}, breakAt: 2, sealed: 0},
		{name: "truncated mid-line", mutate: func(ls [][]byte) [][]byte {
			ls[13] = ls[13][:len(ls[13])/2]
			return ls
		}, breakAt: 14, reason: "truncated", wantTorn: true, sealed: 12},
		{name: "seal count changed", mutate: edit(8, `"n":7`, `"n":6`), breakAt: 8, sealed: 4},
		{name: "mid seal marked final", mutate: edit(8, `","key":`, `","final":true,"key":`), breakAt: 8, reason: "signature", sealed: 4},
		{name: "seal reformatted", mutate: edit(14, `{"seal":{`, `{"seal": {`), breakAt: 14, reason: "exact form", sealed: 12},
		{name: "forged seal, right key id", mutate: resealWith(other, KeyID(pub), true), breakAt: 14, reason: "signature is not valid", sealed: 12},
		{name: "forged seal, own key id", mutate: resealWith(other, KeyID(pubOf(other)), true), breakAt: 14, reason: "not with the factory's key", sealed: 12},
		{name: "unknown seal field", mutate: edit(4, `"n":3,`, `"n":3,"x":1,`), breakAt: 4, reason: "malformed seal", sealed: 0},
		{name: "record without prev", mutate: edit(6, `"prev"`, `"prev_"`), breakAt: 6, reason: "no prev", sealed: 4},

		// Not tampering that can be proven, but never reported as sealed.
		{name: "final seal dropped", mutate: remove(14), sealed: 12, lines: 13},
		{name: "cut after a seal", mutate: func(ls [][]byte) [][]byte { return ls[:8] }, sealed: 8, lines: 8},
		{name: "unsealed tail edited", mutate: func(ls [][]byte) [][]byte {
			ls = ls[:13]
			ls[12] = bytes.Replace(ls[12], []byte(`"i":10`), []byte(`"i":99`), 1)
			return ls
		}, sealed: 12, lines: 13},
		{name: "empty file", mutate: func([][]byte) [][]byte { return nil }, sealed: 0, lines: 0},
		{name: "untouched", mutate: func(ls [][]byte) [][]byte { return ls }, sealed: 14, lines: 14, final: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := make([][]byte, len(orig))
			for i := range orig {
				ls[i] = bytes.Clone(orig[i])
			}
			data := join(c.mutate(ls))
			res, err := Verify(bytes.NewReader(data), pub)
			if c.breakAt == 0 {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if res.Lines != c.lines || res.Sealed != c.sealed || res.Final != c.final {
					t.Fatalf("Verify = %+v; want lines %d sealed %d final %v", res, c.lines, c.sealed, c.final)
				}
				return
			}
			var be *BreakError
			if !errors.As(err, &be) {
				t.Fatalf("Verify = %+v, %v; want a break at line %d", res, err, c.breakAt)
			}
			if be.Line != c.breakAt || !strings.Contains(be.Error(), c.reason) || be.Torn != c.wantTorn {
				t.Fatalf("break %q (torn %v); want line %d containing %q", be.Error(), be.Torn, c.breakAt, c.reason)
			}
			if res.Sealed != c.sealed || res.Final {
				t.Fatalf("result before the break %+v; want sealed %d, not final", res, c.sealed)
			}
		})
	}
}

// Random damage, with the property that matters: whatever Verify accepts as
// sealed is byte for byte what the writer wrote, and only the untouched file
// verifies as final.
func TestRandomDamage(t *testing.T) {
	key := newKey(t)
	pub := pubOf(key)
	orig := sample(t, key, 12)
	rng := mrand.New(mrand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		data := bytes.Clone(orig)
		ls := splitLines(data)
		switch rng.IntN(6) {
		case 0:
			data[rng.IntN(len(data))] ^= byte(1 + rng.IntN(255))
		case 1:
			a := rng.IntN(len(data))
			b := a + 1 + rng.IntN(min(40, len(data)-a))
			data = append(data[:a:a], data[b:]...)
		case 2:
			data = data[:rng.IntN(len(data))]
		case 3:
			a, b := rng.IntN(len(ls)), rng.IntN(len(ls))
			ls[a], ls[b] = ls[b], ls[a]
			data = join(ls)
		case 4:
			a := rng.IntN(len(ls))
			data = join(append(ls[:a:a], ls[a+1:]...))
		case 5:
			a, b := rng.IntN(len(ls)), rng.IntN(len(ls)+1)
			data = join(append(ls[:b:b], append([][]byte{ls[a]}, ls[b:]...)...))
		}
		res, err := Verify(bytes.NewReader(data), pub)
		if res.Sealed > 0 {
			sealedPart := join(splitLines(data)[:res.Sealed])
			if !bytes.HasPrefix(orig, sealedPart) {
				t.Fatalf("case %d: Verify reports %d sealed lines that differ from what was written (err %v)", i, res.Sealed, err)
			}
		}
		if err == nil && res.Final && !bytes.Equal(data, orig) {
			t.Fatalf("case %d: a damaged file verifies as final", i)
		}
	}
}

func FuzzVerify(f *testing.F) {
	key := newKey(f)
	f.Add(sample(f, key, 4))
	f.Add([]byte("{}\n"))
	f.Add([]byte(`{"seal":{"n":0,"hash":"","key":"","sig":""}}` + "\n"))
	pub := pubOf(key)
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Verify(bytes.NewReader(data), pub)
		if res.Sealed > res.Lines || res.Records+res.Seals != res.Lines {
			t.Fatalf("inconsistent result %+v (err %v)", res, err)
		}
		if res.Final && res.Sealed != res.Lines {
			t.Fatalf("final but not all sealed: %+v", res)
		}
	})
}

func TestAppendRules(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "log")
	w, err := Create(path, key, Options{SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []any{"string", []int{1}, 3, nil, map[string]any{"prev": "x"}, map[string]any{"seal": 1}, func() {}} {
		if err := w.Append(bad); err == nil {
			t.Errorf("Append(%#v) accepted", bad)
		}
	}
	// Multi-line raw JSON is compacted to one line; empty objects work.
	if err := w.Append(json.RawMessage("{\n  \"a\": 1,\n  \"b\": \"x\\ny\"\n}")); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(struct{}{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(map[string]any{"nested": map[string]any{"prev": "fine below the top"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(); err != nil { // nothing new: no second seal
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Append(map[string]int{"a": 1}); err == nil {
		t.Error("Append after Close accepted")
	}
	f, _ := os.Open(path)
	defer f.Close()
	res, err := Verify(f, pubOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 3 || res.Seals != 2 || !res.Final {
		t.Fatalf("%+v", res)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %o, want 600", st.Mode().Perm())
	}
	if _, err := Create(path, key, Options{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("Create over an existing log: %v", err)
	}
}

func TestConcurrentAppends(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "egress.log")
	w, err := Create(path, key, Options{SealEvery: 7, SealInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := w.Append(map[string]any{"g": g, "i": i, "host": "example.test"}); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	res, err := Verify(bytes.NewReader(b), pubOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 1600 || !res.Final || res.Sealed != res.Lines {
		t.Fatalf("%+v", res)
	}
}

func TestTimerSeals(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "log")
	w, err := Create(path, key, Options{SealEvery: -1, SealInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		res, err := Verify(bytes.NewReader(b), pubOf(key))
		if err != nil {
			t.Fatal(err)
		}
		if res.Seals == 1 && res.Sealed == res.Lines && !res.Final {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no timed seal: %+v", res)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Idle: no further seals pile up.
	time.Sleep(50 * time.Millisecond)
	b, _ := os.ReadFile(path)
	if res, _ := Verify(bytes.NewReader(b), pubOf(key)); res.Seals != 1 {
		t.Fatalf("idle log got %d seals", res.Seals)
	}
}

// crash abandons a writer the way kill -9 would: no final seal.
func crash(w *Writer) {
	w.mu.Lock()
	w.closed = true
	_ = w.f.Close()
	w.mu.Unlock()
	if w.stop != nil {
		close(w.stop)
		<-w.done
	}
}

func TestCrashAndResume(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := Create(path, key, Options{SealEvery: 4, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		if err := w.Append(event{Seq: i, Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	crash(w) // r1-r4 S r5 r6: 7 lines, 5 sealed

	b, _ := os.ReadFile(path)
	res, err := Verify(bytes.NewReader(b), pubOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Lines != 7 || res.Sealed != 5 || res.Unsealed() != 2 || res.Final {
		t.Fatalf("after crash %+v", res)
	}

	// A power loss also tore the last line.
	torn := `{"prev":"00","seq":7,"ty`
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(torn)
	f.Close()
	b, _ = os.ReadFile(path)
	res, err = Verify(bytes.NewReader(b), pubOf(key))
	var be *BreakError
	if !errors.As(err, &be) || !be.Torn || be.Line != 8 || res.Sealed != 5 {
		t.Fatalf("torn file: %+v %v", res, err)
	}

	w, err = Open(path, key, Options{SealEvery: 4, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r := w.Resumed(); r.Lines != 7 || r.Sealed != 5 || r.DroppedBytes != len(torn) {
		t.Fatalf("Resumed = %+v", r)
	}
	if err := w.Append(event{Seq: 7, Type: "attempt.finished", Data: "interrupted"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	res, err = Verify(bytes.NewReader(b), pubOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 7 || !res.Final || res.Sealed != res.Lines {
		t.Fatalf("after resume %+v", res)
	}

	// A closed log can be continued too; the final seal stays in the chain.
	w, err = Open(path, key, Options{SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Append(event{Seq: 8})
	w.Close()
	b, _ = os.ReadFile(path)
	if res, err := Verify(bytes.NewReader(b), pubOf(key)); err != nil || res.Records != 8 || !res.Final {
		t.Fatalf("reopened closed log: %+v %v", res, err)
	}
}

func TestOpenRefusesBrokenLogs(t *testing.T) {
	key := newKey(t)
	dir := t.TempDir()
	ls := splitLines(sample(t, key, 5))
	ls[1] = bytes.Replace(ls[1], []byte(`"i":2`), []byte(`"i":7`), 1)
	tampered := filepath.Join(dir, "tampered")
	os.WriteFile(tampered, join(ls), 0o600)
	if _, err := Open(tampered, key, Options{}); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("Open of a tampered log: %v", err)
	}
	foreign := filepath.Join(dir, "foreign")
	os.WriteFile(foreign, sample(t, newKey(t), 5), 0o600)
	if _, err := Open(foreign, key, Options{}); err == nil || !strings.Contains(err.Error(), "factory's key") {
		t.Fatalf("Open of a log sealed by another key: %v", err)
	}
	// Open of a missing file starts a new log.
	w, err := Open(filepath.Join(dir, "new"), key, Options{SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Append(map[string]int{"a": 1})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestEmptyLogClose(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "log")
	w, _ := Create(path, key, Options{})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	res, err := Verify(bytes.NewReader(b), pubOf(key))
	if err != nil || res.Lines != 1 || !res.Final || res.Records != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if !strings.Contains(string(b), fmt.Sprintf(`"hash":"%s"`, Genesis)) {
		t.Fatalf("empty log's seal does not sign Genesis: %s", b)
	}
}

func TestVerifyFileAndIsSeal(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "log")
	os.WriteFile(path, sample(t, key, 4), 0o600)
	res, err := VerifyFile(path, pubOf(key))
	if err != nil || !res.Final || res.Records != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := VerifyFile(path+".missing", pubOf(key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	b, _ := os.ReadFile(path)
	seals := 0
	for _, l := range splitLines(b) {
		if IsSeal(l) {
			seals++
		}
	}
	if seals != res.Seals {
		t.Fatalf("IsSeal counted %d seals, Verify %d", seals, res.Seals)
	}
}
