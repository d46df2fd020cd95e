package chainlog

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File names of the factory's log-signing key in the secret-store directory.
const (
	KeyFile       = "chainlog-ed25519.key" // PKCS#8 PEM, mode 0600
	PublicKeyFile = "chainlog-ed25519.pub" // PKIX PEM, for verifiers
)

// LoadOrCreateKey returns the log-signing key kept in dir (the secret-store
// directory), creating dir (0700) and the key (0600) on first use. It
// refuses a directory other users can write (they could swap the key) and a
// key file other users can read.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("signing key: directory %s is writable by other users (mode %o); fix: chmod 700 %s", dir, st.Mode().Perm(), dir)
	}
	path := filepath.Join(dir, KeyFile)
	key, err := loadPrivate(path)
	if errors.Is(err, os.ErrNotExist) {
		key, err = createKey(dir, path)
	}
	if err != nil {
		return nil, err
	}
	if err := ensurePublic(dir, key); err != nil {
		return nil, err
	}
	return key, nil
}

func loadPrivate(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("signing key %s is accessible by other users (mode %o); fix: chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	key, _, err := parseKey(b)
	if err != nil || key == nil {
		return nil, fmt.Errorf("signing key %s is not an ed25519 private key in PEM (fix: move it away; a new key is made on next use, and logs sealed with the old key then need the old public key to verify)", path)
	}
	return key, nil
}

// createKey writes a new key next to its final name and links it into
// place, so a concurrent creator never sees a half-written file and the
// first one to link wins.
func createKey(dir, path string) (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".chainlog-key-*")
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		err = pem.Encode(tmp, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
		if err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return loadPrivate(path)
		}
		return nil, fmt.Errorf("signing key: %w", err)
	}
	syncDir(dir)
	return key, nil
}

// ensurePublic writes the public key file when it is missing and refuses a
// public key file that does not belong to the private key: a verifier
// reading it would accept seals the factory never made.
func ensurePublic(dir string, key ed25519.PrivateKey) error {
	pub := key.Public().(ed25519.PublicKey)
	path := filepath.Join(dir, PublicKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		got, err := ParsePublicKey(b)
		if err != nil || !got.Equal(pub) {
			return fmt.Errorf("signing key: %s does not match %s (fix: delete %s; it is rewritten from the private key)", path, KeyFile, path)
		}
		return nil
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("signing key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".chainlog-pub-*")
	if err != nil {
		return fmt.Errorf("signing key: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o644)
	if err == nil {
		err = pem.Encode(tmp, &pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("signing key: %w", err)
	}
	return nil
}

// ParsePublicKey reads an ed25519 key from PEM: a PUBLIC KEY, or a PRIVATE
// KEY whose public half is used.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	priv, pub, err := parseKey(b)
	if err != nil {
		return nil, err
	}
	if priv != nil {
		return priv.Public().(ed25519.PublicKey), nil
	}
	return pub, nil
}

// LoadPublicKey reads an ed25519 public key (or private key) PEM file.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pub, err := ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return pub, nil
}

func parseKey(b []byte) (ed25519.PrivateKey, ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, nil, errors.New("not a PEM key file")
	}
	switch blk.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("bad private key: %v", err)
		}
		if ek, ok := k.(ed25519.PrivateKey); ok {
			return ek, nil, nil
		}
		return nil, nil, errors.New("not an ed25519 key")
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("bad public key: %v", err)
		}
		if ek, ok := k.(ed25519.PublicKey); ok {
			return nil, ek, nil
		}
		return nil, nil, errors.New("not an ed25519 key")
	}
	return nil, nil, fmt.Errorf("PEM block %q is not an ed25519 key", blk.Type)
}
