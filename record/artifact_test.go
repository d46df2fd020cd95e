package record

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A step controls its artifacts/: what kusaw reads from there on the host
// must be a small regular file, never a link's target, a FIFO or a huge file.
func TestReadArtifactRefusesWhatAStepCanPlant(t *testing.T) {
	att := t.TempDir()
	arts := filepath.Join(att, ArtifactsDir)
	if err := os.MkdirAll(filepath.Join(arts, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "host-secret")
	os.WriteFile(secret, []byte("hunter2"), 0o600)
	os.Symlink(secret, filepath.Join(arts, "link"))
	os.Symlink("/dev/zero", filepath.Join(arts, "zero"))
	if err := syscall.Mkfifo(filepath.Join(arts, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(arts, "big"), make([]byte, 100), 0o644)
	os.WriteFile(filepath.Join(arts, "sub", "f"), []byte("x"), 0o644)

	for _, name := range []string{"link", "zero", "fifo", "big", "sub", "sub/f", "../artifacts/big", ".."} {
		done := make(chan struct{})
		var b []byte
		var err error
		go func() { b, err = ReadArtifact(att, name, 64); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("ReadArtifact(%q) did not return: it blocks", name)
		}
		if err == nil || len(b) != 0 {
			t.Errorf("ReadArtifact(%q) = %q, %v; want refused", name, b, err)
		}
		if name != "sub/f" && name != "../artifacts/big" && name != ".." && !errors.Is(err, ErrNotArtifact) {
			t.Errorf("ReadArtifact(%q): %v, want ErrNotArtifact", name, err)
		}
	}

	// The artifacts folder itself a link: refused too.
	att2 := t.TempDir()
	os.Symlink(arts, filepath.Join(att2, ArtifactsDir))
	if _, err := ReadArtifact(att2, "big", 1000); !errors.Is(err, ErrNotArtifact) {
		t.Errorf("artifacts/ as a link: %v, want ErrNotArtifact", err)
	}

	// The legitimate twin: a small plain file is read.
	os.WriteFile(filepath.Join(arts, "choice"), []byte("2\n"), 0o644)
	if b, err := ReadArtifact(att, "choice", 64); err != nil || string(b) != "2\n" {
		t.Fatalf("choice = %q, %v; want \"2\\n\"", b, err)
	}
	if _, err := ReadArtifact(att, "missing", 64); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v, want not exist", err)
	}
}
