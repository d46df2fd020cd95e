package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: no input makes the loader panic, and every error it reports
// has a code and a message.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("version: 1\nsteps: {a: {run: [x]}}\npipelines: {default: [a]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, fs := Parse(data, "/nonexistent/factory.yaml")
		for _, x := range fs {
			if x.Code == "" || x.Message == "" {
				t.Fatalf("finding without code or message: %+v", x)
			}
		}
	})
}
