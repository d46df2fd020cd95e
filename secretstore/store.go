package secretstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
)

// DirEnv overrides where the store lives (tests, several factories on one
// machine). Default: $XDG_CONFIG_HOME/kusaw, else ~/.config/kusaw.
const DirEnv = "KUSAW_SECRETS_DIR"

const fileName = "secrets.json"

// Dir returns the store's folder: outside every sandbox, hidden from them.
func Dir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return filepath.Abs(d)
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "kusaw"), nil
	}
	h, err := os.UserHomeDir()
	if err != nil || h == "" {
		return "", fmt.Errorf("cannot find the home directory for the secret store; set %s", DirEnv)
	}
	return filepath.Join(h, ".config", "kusaw"), nil
}

// Store is the secret store: one JSON file (0600) in a 0700 folder, keyed by
// the factory key path the secret belongs to.
type Store struct {
	dir string
	mu  sync.Mutex
}

// Open opens the store in its default folder.
func Open() (*Store, error) {
	d, err := Dir()
	if err != nil {
		return nil, err
	}
	return OpenDir(d), nil
}

// OpenDir opens the store in dir.
func OpenDir(dir string) *Store { return &Store{dir: dir} }

// Dir is the store's folder.
func (s *Store) Dir() string { return s.dir }

// Path is the store's file.
func (s *Store) Path() string { return filepath.Join(s.dir, fileName) }

// ErrNotFound is returned by Get for a key that is not stored.
var ErrNotFound = errors.New("secret not found")

func (s *Store) load() (map[string]string, error) {
	data, err := os.ReadFile(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the secret store %s: %v", s.Path(), err)
	}
	if err := checkPrivate(s.Path()); err != nil {
		return nil, err
	}
	m := map[string]string{}
	if err := json.Unmarshal(data, &m); err != nil {
		// Never echo the file: it holds secrets.
		return nil, fmt.Errorf("the secret store %s is damaged (not JSON); move it away and set the secrets again", s.Path())
	}
	return m, nil
}

// checkPrivate refuses a store file others can read: the values may have
// leaked, and the user should know.
func checkPrivate(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("the secret store %s is readable by others (mode %v); run: chmod 600 %s", p, st.Mode().Perm(), p)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("the secret store %s belongs to another user; use your own (set %s)", p, DirEnv)
	}
	return nil
}

// Get returns a stored value.
func (s *Store) Get(key string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		return "", err
	}
	v, ok := m[key]
	if !ok {
		return "", fmt.Errorf("%w: %s (set it with: kusaw config set %s --secret)", ErrNotFound, key, key)
	}
	return v, nil
}

// Has reports whether key is stored.
func (s *Store) Has(key string) bool {
	_, err := s.Get(key)
	return err == nil
}

// Set stores a value, atomically, with the file 0600 and its folder 0700.
func (s *Store) Set(key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the secret store folder %s: %v", s.dir, err)
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return err
	}
	m, err := s.load()
	if err != nil {
		return err
	}
	m[key] = value
	return s.writeLocked(m)
}

// write replaces the store's file with m.
func (s *Store) write(m map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(m)
}

func (s *Store) writeLocked(m map[string]string) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".secrets-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.Path())
}

// Delete removes a key; false when it was not stored.
func (s *Store) Delete(key string) (bool, error) {
	s.mu.Lock()
	m, err := s.load()
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	if _, ok := m[key]; !ok {
		return false, nil
	}
	delete(m, key)
	return true, s.write(m)
}

// Keys lists the stored keys (never the values).
func (s *Store) Keys() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}
