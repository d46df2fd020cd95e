package sandbox

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCachedCheckKeysAndRefusals(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	path := checkCachePath()
	key := checkCacheKey()
	if key == "" {
		if os.Getenv("CI") == "true" && runtime.GOOS == "linux" {
			t.Fatal("no boot id in /proc: the check cache cannot be keyed (CI runs on Linux, where there is one)")
		}
		t.Skip("no boot id on this machine: nothing is cached")
	}
	// A planted "available" result under another key is ignored.
	planted := CheckResult{Backend: "bubblewrap", Available: true, Version: "planted"}
	write := func(k string, at time.Time, r CheckResult) {
		b := encodeCheckCache(k, at, r)
		os.MkdirAll(filepath.Dir(path), 0o700)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("another-machine", time.Now(), planted)
	if got := CachedCheck(); got.Version == "planted" {
		t.Fatal("a result cached under another key was used")
	}
	// A stale one is ignored too.
	write(key, time.Now().Add(-2*checkCacheTTL), planted)
	if got := CachedCheck(); got.Version == "planted" {
		t.Fatal("a stale cached result was used")
	}
	// A fresh one with the right key is used (the point of the cache).
	write(key, time.Now(), planted)
	if got := CachedCheck(); got.Version != "planted" {
		t.Fatalf("a fresh cached result was not used: %+v", got)
	}
	// An unavailable result is never taken from the cache.
	bad := CheckResult{Backend: "bubblewrap", Available: false, Version: "planted-bad"}
	write(key, time.Now(), bad)
	if got := CachedCheck(); got.Version == "planted-bad" {
		t.Fatal("an unavailable result was taken from the cache")
	}
}

// The remembered check reads back as it was written, notes with quotes and
// new lines included; a file that is not wholly one (a line added, left
// out, doubled or cut, another header) is not taken.
func TestCheckCacheFileReadsBack(t *testing.T) {
	now := time.Now()
	r := CheckResult{Backend: "bubblewrap", Path: "/usr/bin/bwrap", Version: "0.8.0", Available: true,
		Notes: []string{`no "Landlock" here`, "two\nlines"}}
	b := encodeCheckCache("k1", now, r)
	got, ok := decodeCheckCache(b, "k1", now.Add(time.Minute))
	if !ok || got.Backend != r.Backend || got.Path != r.Path || got.Version != r.Version || !got.Available || !slices.Equal(got.Notes, r.Notes) {
		t.Fatalf("read back %+v, %v; wrote %+v", got, ok, r)
	}
	s := string(b)
	for name, bad := range map[string]string{
		"another key":        strings.Replace(s, `key "k1"`, `key "k2"`, 1),
		"no key":             strings.Replace(s, "key \"k1\"\n", "", 1),
		"no time":            strings.Replace(s, "at ", "zz ", 1),
		"unavailable":        strings.Replace(s, "available true", "available false", 1),
		"no available line":  strings.Replace(s, "available true\n", "", 1),
		"two versions":       s + "version \"0.7.0\"\n",
		"an unknown line":    s + "extra \"x\"\n",
		"cut short":          s[:len(s)-3],
		"another header":     strings.Replace(s, checkCacheHeader, "kusaw sandbox check 2", 1),
		"JSON of the old":    `{"key":"k1","result":{"available":true}}`,
		"an unquoted value":  strings.Replace(s, `version "0.8.0"`, "version 0.8.0", 1),
		"stale":              string(encodeCheckCache("k1", now.Add(-checkCacheTTL-time.Second), r)),
		"empty":              "",
		"header alone, open": checkCacheHeader,
	} {
		if _, ok := decodeCheckCache([]byte(bad), "k1", now); ok {
			t.Errorf("%s: taken", name)
		}
	}
}
