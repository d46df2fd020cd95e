package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/secretstore"
)

// writeLog writes n records with the store's key; closed says whether the
// writer closes (final seal) or stops as after a crash.
func writeLog(t *testing.T, storeDir string, n int, closed bool) string {
	t.Helper()
	key, err := chainlog.LoadOrCreateKey(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := chainlog.Create(path, key, chainlog.Options{Binding: chainlog.Binding{Run: "r1", Kind: chainlog.KindEvents}, SealEvery: 3, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := w.Append(map[string]any{"seq": i, "type": "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if closed {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func runKusaw(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestLogVerify(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	t.Setenv(secretstore.DirEnv, store)
	good := writeLog(t, store, 5, true)

	code, out, errs := runKusaw("log", "verify", good)
	if code != 0 || !strings.Contains(out, "OK: 8 lines (5 records, 3 seals)") || !strings.Contains(out, "events of run r1 (as the log says") || !strings.Contains(out, "final seal") {
		t.Fatalf("good log: %d %q %q", code, out, errs)
	}

	// Edit line 2.
	b, _ := os.ReadFile(good)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, bytes.Replace(b, []byte(`"seq":1`), []byte(`"seq":9`), 1), 0o600)
	code, out, _ = runKusaw("log", "verify", bad)
	if code != 7 || !strings.Contains(out, "BROKEN at line 4") {
		t.Fatalf("edited log: %d %q", code, out)
	}
	// Several files: one bad one fails the command, each gets its line.
	code, out, _ = runKusaw("log", "verify", good, bad)
	if code != 7 || !strings.Contains(out, good+": OK") || !strings.Contains(out, bad+": BROKEN") {
		t.Fatalf("two files: %d %q", code, out)
	}

	// A log whose writer stopped: the unsealed tail is named.
	crashed := writeLog(t, store, 4, false) // O r r r S r
	b, _ = os.ReadFile(crashed)
	os.WriteFile(crashed, append(b, []byte(`{"prev":"x"}`+"\n")...), 0o600)
	code, out, _ = runKusaw("log", "verify", crashed)
	if code != 7 || !strings.Contains(out, "BROKEN at line 7") {
		t.Fatalf("bad tail: %d %q", code, out)
	}
	os.WriteFile(crashed, b, 0o600)
	code, out, _ = runKusaw("log", "verify", crashed)
	if code != 0 || !strings.Contains(out, "OK up to line 5") || !strings.Contains(out, "line 6 is NOT sealed") {
		t.Fatalf("unsealed tail: %d %q", code, out)
	}
	code, _, _ = runKusaw("log", "verify", "--strict", crashed)
	if code != 7 {
		t.Fatalf("--strict on an unclosed log: %d", code)
	}

	// Verifying against another factory's key fails.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := chainlog.LoadOrCreateKey(other); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runKusaw("log", "verify", "--key", filepath.Join(other, chainlog.PublicKeyFile), good)
	if code != 7 || !strings.Contains(out, "not with the factory's key") {
		t.Fatalf("other key: %d %q", code, out)
	}
	// --key with the right public key works.
	code, _, _ = runKusaw("log", "verify", "--key", filepath.Join(store, chainlog.PublicKeyFile), good)
	if code != 0 {
		t.Fatalf("--key: %d", code)
	}

	// Bad input: one line, documented codes.
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"log", "verify", filepath.Join(t.TempDir(), "missing")}, 5, "does not exist"},
		{[]string{"log", "verify", "--key", good, good}, 2, "PEM"},
		{[]string{"log", "verify", "--key", filepath.Join(store, "nope.pub"), good}, 5, "does not exist"},
		{[]string{"log", "verify"}, 2, "arg"},
	} {
		code, _, errs := runKusaw(c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: %d %q; want %d with %q on one line", c.args, code, errs, c.code, c.msg)
		}
	}
}

func TestLogVerifyWithoutKey(t *testing.T) {
	t.Setenv(secretstore.DirEnv, filepath.Join(t.TempDir(), "empty-store"))
	f := filepath.Join(t.TempDir(), "x.jsonl")
	os.WriteFile(f, nil, 0o600)
	code, _, errs := runKusaw("log", "verify", f)
	if code != 5 || !strings.Contains(errs, "no log-signing key") || !strings.Contains(errs, "--key") {
		t.Fatalf("%d %q", code, errs)
	}
}

// A resumed run's events continue after its first final seal; cut back to
// that seal, the file alone still verifies as closed, but verify checks it
// against the last seal run.json names.
func TestLogVerifyRunCutBack(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	t.Setenv(secretstore.DirEnv, store)
	key, err := chainlog.LoadOrCreateKey(store)
	if err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(t.TempDir(), ".kusaw", "runs", "20261201-100000-abcd")
	os.MkdirAll(runDir, 0o700)
	path := filepath.Join(runDir, "events.jsonl")
	opts := chainlog.Options{Binding: chainlog.Binding{Run: "20261201-100000-abcd", Kind: chainlog.KindEvents}, SealInterval: -1}
	w, err := chainlog.Create(path, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	w.Append(map[string]any{"seq": 1, "type": "run.finished", "data": map[string]any{"state": "interrupted"}})
	w.Close()
	first, _ := os.ReadFile(path)
	w, err = chainlog.Open(path, key, opts) // serve.resume continues it
	if err != nil {
		t.Fatal(err)
	}
	w.Append(map[string]any{"seq": 2, "type": "run.finished", "data": map[string]any{"state": "failed"}})
	w.Close()
	seal := w.LastSeal()
	rec, _ := json.Marshal(map[string]any{"id": "20261201-100000-abcd", "state": "failed", "events_seal": seal})
	os.WriteFile(filepath.Join(runDir, "run.json"), rec, 0o600)

	if code, out, _ := runKusaw("log", "verify", "--strict", path); code != 0 || !strings.Contains(out, "at its place") {
		t.Fatalf("untouched resumed run: %d %q", code, out)
	}
	os.WriteFile(path, first, 0o600) // the resumed part, with the real outcome, cut off
	code, out, _ := runKusaw("log", "verify", "--strict", path)
	if code != 7 || !strings.Contains(out, "run.json names the events' last seal at line") || !strings.Contains(out, "cut back") {
		t.Fatalf("cut back to the first final seal: %d %q", code, out)
	}
	// run.json edited to forget the seal of a run that ended: refused too.
	os.WriteFile(filepath.Join(runDir, "run.json"), []byte(`{"id":"20261201-100000-abcd","state":"failed"}`), 0o600)
	if code, out, _ := runKusaw("log", "verify", path); code != 7 || !strings.Contains(out, "names no last seal") {
		t.Fatalf("run.json without events_seal: %d %q", code, out)
	}
}

// The verdict decides, the printer prints: each kind of verdict, its
// lines and whether it passes with and without --strict.
func TestLogVerdictPrintAndPass(t *testing.T) {
	for _, c := range []struct {
		v                logVerdict
		out              string
		pass, passStrict bool
	}{
		{logVerdict{path: "e.jsonl", counts: "8 lines", closed: "closed with a final seal"}, "e.jsonl: OK: 8 lines; closed with a final seal\n", true, true},
		{logVerdict{path: "e.jsonl", empty: true}, "e.jsonl: OK: empty (the writer never wrote a line)\n", true, false},
		{logVerdict{path: "e.jsonl", counts: "8 lines", sealed: 6, notes: []string{"lines 7-8 are NOT sealed"}},
			"e.jsonl: OK up to line 6 (its last seal): 8 lines\ne.jsonl:   lines 7-8 are NOT sealed\n", true, false},
		{logVerdict{path: "e.jsonl", broken: errors.New("line 2: hash mismatch"), breakAt: true, sealed: 1},
			"e.jsonl: BROKEN at line 2: hash mismatch\ne.jsonl:   lines 1-1 verify and are sealed\n", false, false},
		{logVerdict{path: "e.jsonl", broken: errors.New("line 2: hash mismatch"), breakAt: true}, "e.jsonl: BROKEN at line 2: hash mismatch\n", false, false},
		{logVerdict{path: "egress.log", broken: errors.New("sealed by worker w1, which this serve never enrolled")},
			"egress.log: BROKEN: sealed by worker w1, which this serve never enrolled\n", false, false},
	} {
		var b bytes.Buffer
		printVerdict(&b, &c.v)
		if b.String() != c.out || c.v.passes(false) != c.pass || c.v.passes(true) != c.passStrict {
			t.Errorf("%+v: printed %q (want %q), passes %v/%v (want %v/%v)", c.v, b.String(), c.out, c.v.passes(false), c.v.passes(true), c.pass, c.passStrict)
		}
	}
}
