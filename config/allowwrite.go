package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// systemDirs are never writable from a sandbox.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/snap", "/System", "/Library", "/Applications", "/private/etc", "/private/var"}

// homeRefused are paths under the home that allow_write may never name:
// credentials, shell start-up files, agents' own settings, kusaw's store.
var homeRefused = []string{
	".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".netrc", ".git-credentials",
	".password-store", ".config/gh", ".npmrc", ".pypirc",
	".bashrc", ".bash_profile", ".profile", ".zshrc", ".zprofile", ".zshenv", ".config/fish",
	".config", "Library", ".claude", ".claude.json", ".cursor", ".codex", ".gemini",
	".config/kusaw", ".local/share/kusaw",
}

// CheckAllowWrite refuses allow_write entries that would let a sandboxed
// step change the system, the home, credentials or what starts programs.
func CheckAllowWrite(p string) error {
	return checkAllowWrite(p, homeDir())
}

func homeDir() string {
	h, _ := os.UserHomeDir()
	return h
}

func checkAllowWrite(p, home string) error {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if p == "/" {
		return fmt.Errorf("%s is the root of the disk", p)
	}
	for _, s := range systemDirs {
		if p == s || strings.HasPrefix(p, s+"/") {
			// /var/tmp-like scratch under /var is still refused: kusaw gives
			// every attempt a private temp folder instead.
			return fmt.Errorf("%s is a system directory", p)
		}
	}
	if home != "" {
		home = filepath.Clean(home)
		if p == home || strings.HasPrefix(home, p+"/") {
			return fmt.Errorf("%s is the home directory or above it", p)
		}
		for _, r := range homeRefused {
			rp := filepath.Join(home, r)
			if p == rp || strings.HasPrefix(p, rp+"/") {
				return fmt.Errorf("%s is a credential, start-up or agent settings path", p)
			}
		}
	}
	return nil
}
