package chainlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kusaw")
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %o, want 700", st.Mode().Perm())
	}
	st, _ = os.Stat(filepath.Join(dir, KeyFile))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %o, want 600", st.Mode().Perm())
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("second load: %v, same key %v", err, k1.Equal(k2))
	}
	pub, err := LoadPublicKey(filepath.Join(dir, PublicKeyFile))
	if err != nil || !pub.Equal(pubOf(k1)) {
		t.Fatalf("public key file: %v", err)
	}
	// The private key file also works as a verification key.
	if p, err := LoadPublicKey(filepath.Join(dir, KeyFile)); err != nil || !p.Equal(pub) {
		t.Fatalf("public half of the private key file: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestLoadOrCreateKeyConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kusaw")
	var wg sync.WaitGroup
	keys := make([][]byte, 8)
	for i := range keys {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			k, err := LoadOrCreateKey(dir)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = k
		}(i)
	}
	wg.Wait()
	for i := range keys {
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatal("concurrent first uses made different keys")
		}
	}
}

func TestLoadOrCreateKeyRefusals(t *testing.T) {
	// A directory others can write: they could put their own key there.
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := LoadOrCreateKey(open); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("world-writable dir: %v", err)
	}
	// A key others can read.
	dir := filepath.Join(t.TempDir(), "kusaw")
	if _, err := LoadOrCreateKey(dir); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, KeyFile)
	os.Chmod(key, 0o644)
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("readable key: %v", err)
	}
	os.Chmod(key, 0o600)
	// A public key file swapped for another key's.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := LoadOrCreateKey(other); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(other, PublicKeyFile))
	os.WriteFile(filepath.Join(dir, PublicKeyFile), b, 0o644)
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched public key: %v", err)
	}
	// A garbage key file.
	os.WriteFile(key, []byte("nope"), 0o600)
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "not an ed25519 private key") {
		t.Errorf("garbage key: %v", err)
	}
	if _, err := LoadPublicKey(filepath.Join(dir, "missing.pub")); err == nil {
		t.Error("missing public key file accepted")
	}
}
