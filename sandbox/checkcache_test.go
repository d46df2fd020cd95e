package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
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
		b, _ := json.Marshal(map[string]any{"key": k, "at": at, "result": r})
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
