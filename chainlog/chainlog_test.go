package chainlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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

var (
	runEvents = Binding{Run: "20261201-120000-abcd", Kind: KindEvents}
	attEgress = Binding{Run: "20261201-120000-abcd", Step: "build", Attempt: 1, Kind: KindEgress}
	attEvents = Binding{Run: "20261201-120000-abcd", Step: "build", Attempt: 1, Kind: KindEvents}
)

// opts seal only when told to (Seal, Close), so tests know every line.
func opts(b Binding) Options { return Options{Binding: b, SealEvery: -1, SealInterval: -1} }

// sampleFor writes n records and closes the log: O r1 .. rn F.
func sampleFor(t testing.TB, key ed25519.PrivateKey, b Binding, n int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	w, err := Create(path, key, opts(b))
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
	b2, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b2
}

func sample(t testing.TB, key ed25519.PrivateKey, n int) []byte {
	return sampleFor(t, key, runEvents, n)
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
	res, err := Verify(bytes.NewReader(b), pubOf(key), runEvents)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lines != 12 || res.Records != 10 || res.Seals != 2 || !res.Final || res.Binding != runEvents || len(res.Recovered) != 0 {
		t.Fatalf("Verify = %+v", res)
	}
	// Without an expected place, the log's own opening seal says it.
	if res2, err := Verify(bytes.NewReader(b), pubOf(key), Binding{}); err != nil || res2.Binding != runEvents {
		t.Fatalf("Verify without place = %+v %v", res2, err)
	}
	ls := splitLines(b)
	var first map[string]any
	if err := json.Unmarshal(ls[1], &first); err != nil {
		t.Fatal(err)
	}
	if first["type"] != "step.started" || first["seq"] != 1.0 || first["prev"] != hashHex(bytes.TrimSuffix(ls[0], []byte("\n"))) {
		t.Fatalf("first record %s", ls[1])
	}
	if !bytes.HasPrefix(ls[1], []byte(`{"prev":"`)) {
		t.Errorf("prev is not the first field: %s", ls[1])
	}
	if !bytes.HasPrefix(ls[0], []byte(`{"seal":{"mark":"open","of":"20261201-120000-abcd","kind":"events","n":0,"hash":"`+Genesis)) ||
		!bytes.HasPrefix(ls[11], []byte(`{"seal":{"mark":"final","of":"20261201-120000-abcd","kind":"events","n":11,`)) {
		t.Errorf("seals: %s %s", ls[0], ls[11])
	}
	if last := res.LastSeal(); last.Line != 12 || !res.HasSeal(res.SealLines[0]) {
		t.Errorf("seal refs %+v", res.SealLines)
	}
}

// A log verifies only in its own place: a copy of one attempt's egress.log
// over another's, or of a run's events over another run's, fails.
func TestBindingAttack(t *testing.T) {
	key := newKey(t)
	pub := pubOf(key)
	egress := sampleFor(t, key, attEgress, 3)
	other := attEgress
	other.Attempt = 2
	for _, c := range []struct {
		name   string
		expect Binding
		reason string
	}{
		{"another attempt", other, "is the egress of run 20261201-120000-abcd, step build, attempt 1, not the egress of run 20261201-120000-abcd, step build, attempt 2"},
		{"another step", Binding{Run: attEgress.Run, Step: "test", Attempt: 1, Kind: KindEgress}, "not the egress of run 20261201-120000-abcd, step test"},
		{"another kind", attEvents, "not the events of run"},
		{"another run", Binding{Run: "20261201-130000-ffff", Step: "build", Attempt: 1, Kind: KindEgress}, "copied from another place"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(egress), pub, c.expect)
			var be *BreakError
			if !errors.As(err, &be) || be.Line != 1 || !strings.Contains(be.Reason, c.reason) {
				t.Fatalf("Verify as %v: %v; want a break at line 1 with %q", c.expect, err, c.reason)
			}
		})
	}
	// Legitimate twin: in its own place it verifies.
	if res, err := Verify(bytes.NewReader(egress), pub, attEgress); err != nil || !res.Final {
		t.Fatalf("own place: %+v %v", res, err)
	}
	// Rewriting the opening seal's place is a forged seal; lines moved from
	// another log do not verify under this one's place.
	ls := splitLines(egress)
	ls[0] = bytes.Replace(ls[0], []byte(`/build/1"`), []byte(`/build/2"`), 1)
	if _, err := Verify(bytes.NewReader(join(ls)), pub, other); err == nil || !strings.Contains(err.Error(), "seal signature is not valid") {
		t.Fatalf("edited opening seal: %v", err)
	}
	mixed := splitLines(sampleFor(t, key, other, 3))
	orig := splitLines(egress)
	spliced := join(append([][]byte{mixed[0]}, orig[1:]...))
	if _, err := Verify(bytes.NewReader(spliced), pub, other); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("lines of attempt 1 under attempt 2's opening seal: %v", err)
	}
	// A seal of another log moved in (the chain re-pointed to it by a
	// forger) names its own place.
	moved := splitLines(egress)
	moved[len(moved)-1] = mixed[len(mixed)-1]
	if _, err := Verify(bytes.NewReader(join(moved)), pub, attEgress); err == nil {
		t.Fatal("a final seal of another log accepted")
	}
}

// Each way of tampering is caught at the right line.
func TestTampering(t *testing.T) {
	key := newKey(t)
	pub := pubOf(key)
	orig := splitLines(sample(t, key, 10)) // 12 lines: O r1..r10 F
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
	resealWith := func(k ed25519.PrivateKey, keyID string) func([][]byte) [][]byte {
		return func(ls [][]byte) [][]byte {
			var s sealLine
			_ = json.Unmarshal(ls[11], &s)
			s.Seal.Key = keyID
			s.Seal.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(k, sealMessage(&s.Seal)))
			b, _ := json.Marshal(s)
			ls[11] = append(b, '\n')
			return ls
		}
	}
	// A forger without the key can still chain lines correctly: the
	// signature is what stops them.
	// A forger without the key can still chain lines correctly: the
	// seal's signature is what stops them.
	rechained := func(ls [][]byte) [][]byte {
		ls[2] = bytes.Replace(ls[2], []byte(`"i":2`), []byte(`"i":9`), 1)
		for i := 3; i < 11; i++ {
			h := hashHex(bytes.TrimSuffix(ls[i-1], []byte("\n")))
			ls[i] = append([]byte(`{"prev":"`+h+`"`), ls[i][len(`{"prev":"`)+64+1:]...)
		}
		return ls
	}
	cases := []struct {
		name     string
		mutate   func([][]byte) [][]byte
		breakAt  int    // 0: no error
		reason   string // part of the error
		lines    int
		sealed   int
		final    bool
		wantTorn bool
	}{
		{name: "edited record", mutate: edit(3, `"i":2`, `"i":3`), breakAt: 4, reason: "prev does not match line 3 (that line was edited"},
		{name: "edited record, chain repaired", mutate: rechained, breakAt: 12, reason: "seal does not match line 11"},
		{name: "edited last record", mutate: edit(11, `"i":10`, `"i":11`), breakAt: 12, reason: "seal does not match line 11"},
		{name: "removed record", mutate: remove(5), breakAt: 5, reason: "prev does not match"},
		{name: "removed opening seal", mutate: remove(1), breakAt: 1, reason: "opening seal"},
		{name: "reordered", mutate: func(ls [][]byte) [][]byte { ls[4], ls[5] = ls[5], ls[4]; return ls }, breakAt: 5},
		{name: "inserted copy", mutate: func(ls [][]byte) [][]byte {
			return append(ls[:2:2], append([][]byte{ls[1]}, ls[2:]...)...)
		}, breakAt: 3},
		{name: "duplicated opening seal", mutate: func(ls [][]byte) [][]byte {
			return append(ls[:1:1], append([][]byte{ls[0]}, ls[1:]...)...)
		}, breakAt: 2, reason: "opening seal after line 1"},
		{name: "blank line", mutate: func(ls [][]byte) [][]byte {
			return append(ls[:6:6], append([][]byte{[]byte("\n")}, ls[6:]...)...)
		}, breakAt: 7, reason: "not a JSON object"},
		{name: "CRLF", mutate: func(ls [][]byte) [][]byte {
			for i := range ls {
				ls[i] = append(bytes.TrimSuffix(ls[i], []byte("\n")), '\r', '\n')
			}
			return ls
		}, breakAt: 1},
		{name: "truncated mid-line", mutate: func(ls [][]byte) [][]byte {
			ls[11] = ls[11][:len(ls[11])/2]
			return ls
		}, breakAt: 12, reason: "truncated", wantTorn: true},
		{name: "seal count changed", mutate: edit(12, `"n":11`, `"n":10`), breakAt: 12},
		{name: "final seal made recovered", mutate: edit(12, `"mark":"final"`, `"mark":"recovered"`), breakAt: 12, reason: "signature"},
		{name: "seal reformatted", mutate: edit(12, `{"seal":{`, `{"seal": {`), breakAt: 12, reason: "exact form"},
		{name: "forged seal, right key id", mutate: resealWith(other, KeyID(pub)), breakAt: 12, reason: "signature is not valid"},
		{name: "forged seal, own key id", mutate: resealWith(other, KeyID(pubOf(other))), breakAt: 12, reason: "not with the factory's key"},
		{name: "unknown seal field", mutate: edit(12, `"n":11,`, `"n":11,"x":1,`), breakAt: 12, reason: "malformed seal"},
		{name: "record without prev", mutate: edit(6, `"prev"`, `"prev_"`), breakAt: 6, reason: "no prev"},

		// Not provable from the file alone; never reported as sealed.
		{name: "final seal dropped", mutate: remove(12), lines: 11, sealed: 1},
		{name: "cut", mutate: func(ls [][]byte) [][]byte { return ls[:8] }, lines: 8, sealed: 1},
		{name: "unsealed tail edited", mutate: func(ls [][]byte) [][]byte {
			ls = ls[:11]
			ls[10] = bytes.Replace(ls[10], []byte(`"i":10`), []byte(`"i":99`), 1)
			return ls
		}, lines: 11, sealed: 1},
		{name: "empty file", mutate: func([][]byte) [][]byte { return nil }, lines: 0},
		{name: "untouched", mutate: func(ls [][]byte) [][]byte { return ls }, lines: 12, sealed: 12, final: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := make([][]byte, len(orig))
			for i := range orig {
				ls[i] = bytes.Clone(orig[i])
			}
			data := join(c.mutate(ls))
			res, err := Verify(bytes.NewReader(data), pub, runEvents)
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
			if res.Lines != c.breakAt-1 || res.Final {
				t.Fatalf("result before the break %+v", res)
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
	orig := sampleSealed(t, key, 12)
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
		res, err := Verify(bytes.NewReader(data), pub, runEvents)
		if res.Sealed > 0 {
			good := join(splitLines(data)[:res.Sealed])
			if !bytes.HasPrefix(orig, good) {
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
	f.Add([]byte(`{"seal":{"mark":"open","of":"r","kind":"events","n":0,"hash":"","prev_seal":"","key":"","sig":""}}` + "\n"))
	pub := pubOf(key)
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Verify(bytes.NewReader(data), pub, Binding{})
		if res.Records+res.Seals != res.Lines || len(res.SealLines) != res.Seals || res.Sealed > res.Lines {
			t.Fatalf("inconsistent result %+v (err %v)", res, err)
		}
		if res.Lines > 0 && res.Seals == 0 {
			t.Fatalf("lines accepted without an opening seal: %+v", res)
		}
	})
}

func TestAppendRules(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "log")
	w, err := Create(path, key, opts(runEvents))
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
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Append(map[string]int{"a": 1}); err == nil {
		t.Error("Append after Close accepted")
	}
	res, err := VerifyFile(path, pubOf(key), runEvents)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 3 || res.Seals != 2 || !res.Final {
		t.Fatalf("%+v", res)
	}
	if w.LastSeal() != res.LastSeal() {
		t.Fatalf("writer's last seal %+v, verifier's %+v", w.LastSeal(), res.LastSeal())
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %o, want 600", st.Mode().Perm())
	}
	if _, err := Create(path, key, opts(runEvents)); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("Create over an existing log: %v", err)
	}
	if _, err := Create(path+"2", key, Options{}); err == nil || !strings.Contains(err.Error(), "binding") {
		t.Errorf("Create without a binding: %v", err)
	}
}

func TestConcurrentAppends(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "egress.log")
	w, err := Create(path, key, Options{Binding: attEgress, SealEvery: 7, SealInterval: time.Millisecond})
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
	res, err := VerifyFile(path, pubOf(key), attEgress)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 1600 || !res.Final || res.Sealed != res.Lines {
		t.Fatalf("%+v", res)
	}
}

// A line waits for its seal at most SealInterval; Seal signs at once.
func TestTimerAndCheckpointSeals(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "log")
	w, err := Create(path, key, Options{Binding: attEvents, SealEvery: -1, SealInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := VerifyFile(path, pubOf(key), attEvents)
		if err != nil {
			t.Fatal(err)
		}
		if res.Seals == 2 && res.Unsealed() == 0 && !res.Final {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no timed seal: %+v", res)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Idle: no further seals pile up.
	time.Sleep(50 * time.Millisecond)
	if res, _ := VerifyFile(path, pubOf(key), attEvents); res.Seals != 2 {
		t.Fatalf("idle log got %d seals", res.Seals)
	}

	cp := filepath.Join(t.TempDir(), "checkpoint")
	w2, err := Create(cp, key, opts(attEvents))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	w2.Append(map[string]int{"a": 1})
	if res, _ := VerifyFile(cp, pubOf(key), attEvents); res.Unsealed() != 1 {
		t.Fatalf("before the checkpoint: %+v", res)
	}
	if err := w2.Seal(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Seal(); err != nil { // nothing new: no second seal
		t.Fatal(err)
	}
	if res, _ := VerifyFile(cp, pubOf(key), attEvents); res.Unsealed() != 0 || res.Seals != 2 {
		t.Fatalf("after the checkpoint: %+v", res)
	}
}

// crash abandons a writer the way kill -9 would: no final seal.
func crash(w *Writer) {
	w.mu.Lock()
	w.closed = true
	_ = w.f.Close()
	w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

func TestCrashAndResume(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := Create(path, key, Options{Binding: attEvents, SealEvery: 4, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		if err := w.Append(event{Seq: i, Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	crash(w) // O r1-r4 S r5 r6: 8 lines, 6 sealed

	res, err := VerifyFile(path, pubOf(key), attEvents)
	if err != nil || res.Lines != 8 || res.Sealed != 6 || res.Final {
		t.Fatalf("after crash %+v %v", res, err)
	}

	// A power loss also tore the last line.
	torn := `{"prev":"00","seq":7,"ty`
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(torn)
	f.Close()
	res, err = VerifyFile(path, pubOf(key), attEvents)
	var be *BreakError
	if !errors.As(err, &be) || !be.Torn || be.Line != 9 || res.Sealed != 6 {
		t.Fatalf("torn file: %+v %v", res, err)
	}

	w, err = Open(path, key, Options{Binding: attEvents, SealEvery: 4, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r := w.Resumed(); r.Lines != 8 || r.Unsealed != 2 || !r.Interrupted || r.DroppedBytes != len(torn) {
		t.Fatalf("Resumed = %+v", r)
	}
	if err := w.Append(event{Seq: 7, Type: "attempt.finished", Data: "interrupted"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	res, err = VerifyFile(path, pubOf(key), attEvents)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 7 || !res.Final || res.Sealed != res.Lines || len(res.Recovered) != 1 {
		t.Fatalf("after resume %+v", res)
	}
	// The marker names what the dead writer left unsigned; it did not
	// sign those lines as its own.
	if r := res.Recovered[0]; r.Line != 9 || r.Unsealed != 2 || r.From != 7 || r.To != 8 || r.DroppedBytes != len(torn) {
		t.Fatalf("recovered marker %+v", r)
	}

	// A closed log can be continued too (a resumed run); no marker then.
	w, err = Open(path, key, opts(attEvents))
	if err != nil {
		t.Fatal(err)
	}
	if w.Resumed().Interrupted {
		t.Fatal("a closed log reported as interrupted")
	}
	w.Append(event{Seq: 8})
	w.Close()
	if res, err := VerifyFile(path, pubOf(key), attEvents); err != nil || res.Records != 8 || !res.Final || len(res.Recovered) != 1 {
		t.Fatalf("reopened closed log: %+v %v", res, err)
	}
}

// The attack on recovery: invented lines, correctly chained, handed to
// Open. It must refuse them, or name them unsealed, never sign them.
func TestOpenRefusesForgedLines(t *testing.T) {
	key := newKey(t)
	dir := t.TempDir()
	forged := filepath.Join(dir, "forged")
	var buf bytes.Buffer
	prev := Genesis
	for i := 1; i <= 3; i++ {
		line := fmt.Sprintf(`{"prev":"%s","seq":%d,"type":"run.finished"}`, prev, i)
		buf.WriteString(line + "\n")
		prev = hashHex([]byte(line))
	}
	os.WriteFile(forged, buf.Bytes(), 0o600)
	if _, err := Open(forged, key, opts(runEvents)); err == nil || !strings.Contains(err.Error(), "opening seal") {
		t.Fatalf("Open of forged chained lines: %v", err)
	}
	if b, _ := os.ReadFile(forged); !bytes.Equal(b, buf.Bytes()) {
		t.Fatal("Open changed a log it refused")
	}
	// Forged lines after a real log's final seal: Open continues, and its
	// marker names them as found unsealed.
	real := splitLines(sample(t, key, 2))
	tail := fmt.Sprintf(`{"prev":"%s","seq":3,"type":"run.finished"}`+"\n", hashHex(bytes.TrimSuffix(real[3], []byte("\n"))))
	os.WriteFile(forged, join(append(real, []byte(tail))), 0o600)
	w, err := Open(forged, key, opts(runEvents))
	if err != nil {
		t.Fatal(err)
	}
	if r := w.Resumed(); r.Unsealed != 1 || !r.Interrupted {
		t.Fatalf("Resumed = %+v", r)
	}
	w.Append(map[string]int{"seq": 4})
	w.Close()
	res, err := VerifyFile(forged, pubOf(key), runEvents)
	if err != nil || !res.Final || len(res.Recovered) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if r := res.Recovered[0]; r.Unsealed != 1 || r.From != 5 || r.To != 5 {
		t.Fatalf("the forged line is not named unsealed: %+v", r)
	}
}

func TestOpenRefusesBrokenLogs(t *testing.T) {
	key := newKey(t)
	dir := t.TempDir()
	ls := splitLines(sample(t, key, 5))
	ls[2] = bytes.Replace(ls[2], []byte(`"i":2`), []byte(`"i":7`), 1)
	tampered := filepath.Join(dir, "tampered")
	os.WriteFile(tampered, join(ls), 0o600)
	if _, err := Open(tampered, key, opts(runEvents)); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("Open of a tampered log: %v", err)
	}
	foreign := filepath.Join(dir, "foreign")
	os.WriteFile(foreign, sample(t, newKey(t), 5), 0o600)
	if _, err := Open(foreign, key, opts(runEvents)); err == nil || !strings.Contains(err.Error(), "factory's key") {
		t.Fatalf("Open of a log sealed by another key: %v", err)
	}
	elsewhere := filepath.Join(dir, "elsewhere")
	os.WriteFile(elsewhere, sampleFor(t, key, attEvents, 2), 0o600)
	if _, err := Open(elsewhere, key, opts(runEvents)); err == nil || !strings.Contains(err.Error(), "another place") {
		t.Fatalf("Open of another place's log: %v", err)
	}
	// Open of a missing file starts a new log.
	w, err := Open(filepath.Join(dir, "new"), key, opts(runEvents))
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
	w, _ := Create(path, key, opts(runEvents))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := VerifyFile(path, pubOf(key), runEvents)
	if err != nil || res.Lines != 2 || !res.Final || res.Records != 0 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestVerifyFileAndIsSeal(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "log")
	os.WriteFile(path, sample(t, key, 4), 0o600)
	res, err := VerifyFile(path, pubOf(key), runEvents)
	if err != nil || !res.Final || res.Records != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := VerifyFile(path+".missing", pubOf(key), runEvents); !errors.Is(err, os.ErrNotExist) {
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

func TestParseOf(t *testing.T) {
	for of, want := range map[string]Binding{
		"r1":         {Run: "r1", Kind: KindEgress},
		"r1/build/3": {Run: "r1", Step: "build", Attempt: 3, Kind: KindEgress},
	} {
		if b, err := ParseOf(of, KindEgress); err != nil || b != want || b.Of() != of {
			t.Errorf("ParseOf(%q) = %+v %v", of, b, err)
		}
	}
	for _, bad := range []string{"", "r/s", "r/s/0", "r/s/x", "r//1", "a/b/c/d"} {
		if _, err := ParseOf(bad, KindEvents); err == nil {
			t.Errorf("ParseOf(%q) accepted", bad)
		}
	}
}

func hashHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sampleSealed is sample with a seal every 3 records.
func sampleSealed(t testing.TB, key ed25519.PrivateKey, n int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	w, err := Create(path, key, Options{Binding: runEvents, SealEvery: 3, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := w.Append(event{Seq: i, Type: "x", Data: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	return b
}

// DeferOpenSync (egress.log, made on a step's start path): Create syncs
// nothing; the first seal after a line syncs the file and its folder. A
// crash before that can lose the opening seal, whole or torn, and Open
// completes such a log with a fresh opening seal that verifies.
func TestDeferOpenSync(t *testing.T) {
	key := newKey(t)
	path := filepath.Join(t.TempDir(), "egress.log")
	o := Options{Binding: attEgress, SealEvery: 1, SealInterval: -1, DeferOpenSync: true}
	w, err := Create(path, key, o)
	if err != nil {
		t.Fatal(err)
	}
	if !w.lastSync.IsZero() || !w.dirPending {
		t.Fatalf("Create synced with DeferOpenSync (last sync %v, folder pending %v)", w.lastSync, w.dirPending)
	}
	if err := w.Append(event{Seq: 1, Type: "x"}); err != nil {
		t.Fatal(err)
	}
	if w.lastSync.IsZero() || w.dirPending {
		t.Fatalf("the first seal after a line did not sync the file and its folder")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if res, err := VerifyFile(path, pubOf(key), attEgress); err != nil || !res.Final || res.Records != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// Without the option Create syncs at once.
	p2 := filepath.Join(t.TempDir(), "events.jsonl")
	w2, err := Create(p2, key, Options{Binding: attEvents, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if w2.lastSync.IsZero() {
		t.Errorf("Create without DeferOpenSync did not sync its opening seal")
	}
	w2.Close()

	// What a power loss before the first sync can leave: an empty file or
	// a torn opening seal. Open makes a log that verifies of both.
	for name, content := range map[string]string{"empty": "", "torn": `{"seal":{"mark":"open","of":`} {
		p := filepath.Join(t.TempDir(), name+".log")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := Open(p, key, o)
		if err != nil {
			t.Fatalf("%s: Open: %v", name, err)
		}
		if err := w.Append(event{Seq: 1, Type: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if res, err := VerifyFile(p, pubOf(key), attEgress); err != nil || !res.Final || res.Records != 1 {
			t.Errorf("%s: %+v %v", name, res, err)
		}
	}
}
