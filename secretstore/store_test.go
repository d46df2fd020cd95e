package secretstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSetGetModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kusaw")
	s := OpenDir(dir)
	if _, err := s.Get("a"); err == nil {
		t.Fatal("Get of a missing key must fail")
	}
	if err := s.Set("providers.claude-code.api_key", "sk-very-secret"); err != nil {
		t.Fatal(err)
	}
	v, err := s.Get("providers.claude-code.api_key")
	if err != nil || v != "sk-very-secret" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, want 0700", st.Mode().Perm())
	}
	st, _ = os.Stat(s.Path())
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, want 0600", st.Mode().Perm())
	}
	keys, _ := s.Keys()
	if len(keys) != 1 || keys[0] != "providers.claude-code.api_key" {
		t.Fatalf("keys %v", keys)
	}
}

func TestReadableStoreRefusedWithoutLeaking(t *testing.T) {
	dir := t.TempDir()
	s := OpenDir(dir)
	if err := s.Set("k", "sk-very-secret"); err != nil {
		t.Fatal(err)
	}
	os.Chmod(s.Path(), 0o644)
	_, err := s.Get("k")
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("want a chmod fix, got %v", err)
	}
	os.Chmod(s.Path(), 0o600)
	os.WriteFile(s.Path(), []byte("garbage sk-very-secret"), 0o600)
	_, err = s.Get("k")
	if err == nil || strings.Contains(err.Error(), "sk-very-secret") {
		t.Fatalf("damaged store error must not echo content: %v", err)
	}
}
