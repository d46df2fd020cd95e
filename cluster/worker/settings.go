package worker

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// SettingsFile keeps, in the worker's state folder, what it was started
// with: a restart without the flags (a service, a start without its
// token) keeps them.
const SettingsFile = "worker-settings.json"

// Settings are the kept flags of kusaw worker.
type Settings struct {
	MaxParallel int      `json:"max_parallel,omitempty"`
	Pools       []string `json:"pools,omitempty"`
}

// LoadSettings reads the kept settings (none when there are none).
func LoadSettings(stateDir string) Settings {
	var s Settings
	if b, err := os.ReadFile(filepath.Join(stateDir, SettingsFile)); err == nil {
		_ = json.Unmarshal(b, &s)
	}
	return s
}

// SaveSettings keeps s for the next start.
func SaveSettings(stateDir string, s Settings) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	p := filepath.Join(stateDir, SettingsFile)
	if err := os.WriteFile(p+".tmp", append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}
