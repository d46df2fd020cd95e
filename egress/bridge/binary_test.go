package bridge

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestArgvPicksBridgeBeside: kusaw-bridge beside kusaw is used when it is
// an executable file; a missing one, a folder or a file without the
// execute bit falls back to kusaw __egress-bridge.
func TestArgvPicksBridgeBeside(t *testing.T) {
	dir := t.TempDir()
	kusaw := filepath.Join(dir, "kusaw")
	tail := []string{"--lease", "/s", "--listen", "127.0.0.1:3128", "--"}
	fallback := append([]string{kusaw, "__egress-bridge"}, tail...)
	if got := Argv(kusaw, "/s", "127.0.0.1:3128", nil); !slices.Equal(got, fallback) {
		t.Errorf("none beside: %v", got)
	}
	b := filepath.Join(dir, BinaryName)
	if err := os.WriteFile(b, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Argv(kusaw, "/s", "127.0.0.1:3128", nil); !slices.Equal(got, fallback) {
		t.Errorf("not executable: %v", got)
	}
	if err := os.Chmod(b, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Argv(kusaw, "/s", "127.0.0.1:3128", nil); !slices.Equal(got, append([]string{b}, tail...)) {
		t.Errorf("beside: %v", got)
	}
	os.Remove(b)
	os.Mkdir(b, 0o755)
	if got := Argv(kusaw, "/s", "127.0.0.1:3128", nil); !slices.Equal(got, fallback) {
		t.Errorf("a folder: %v", got)
	}
	if got := Argv(kusaw, "/s", "127.0.0.1:3128", []int{5432, 7000}); !slices.Equal(got, []string{kusaw, "__egress-bridge", "--lease", "/s", "--listen", "127.0.0.1:3128", "--local", "5432,7000", "--"}) {
		t.Errorf("local ports: %v", got)
	}
}
