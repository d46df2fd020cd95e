package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "36h": 36 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "d", "0d", "-3d", "3.5d", "1x", "0", "-1h", "d3", "+3d"} {
		if _, err := ParseAge(bad); err == nil || !strings.Contains(err.Error(), "30d") {
			t.Errorf("ParseAge(%q): %v", bad, err)
		}
	}
}

func TestRetentionLoads(t *testing.T) {
	dir := fixtureDir(t)
	path := filepath.Join(dir, "factory.yaml")
	os.WriteFile(path, []byte("version: 1\nrepos:\n  app: {path: app}\npipelines:\n  default: [a]\nsteps:\n  a: {run: [\"true\"]}\nretention:\n  max_age: 30d\n  max_runs: 500\n"), 0o644)
	f, fs, err := Load(path)
	if err != nil || len(fs.Errors()) > 0 {
		t.Fatalf("%v %v", err, fs)
	}
	if f.Retention == nil || f.Retention.MaxAge != 30*24*time.Hour || f.Retention.MaxRuns != 500 {
		t.Errorf("retention %+v", f.Retention)
	}
	if p := f.PosOf("retention.max_runs"); p.Line != 10 {
		t.Errorf("retention.max_runs at %+v, want line 10", p)
	}
}
