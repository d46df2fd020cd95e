// Package allowwrite decides which folders a sandboxed step may never be
// given to write: the system, the home, credentials, start-up files,
// agents' settings. config checks allow_write with it, and kusaw sandbox
// exec without a factory file checks its folder; it imports nothing of
// kusaw, so that path links no configuration code.
package allowwrite

import (
	"fmt"
	"path/filepath"
	"strings"
)

// systemDirs belong to the operating system: neither they nor anything
// below them may be writable from a sandbox.
var systemDirs = []string{
	"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr", "/snap",
	"/var/log", "/var/cache", "/var/spool", "/var/mail", "/var/run", "/var/lock", "/var/backups", "/var/db", "/var/empty", "/var/root",
	"/var/lib/dpkg", "/var/lib/apt", "/var/lib/rpm", "/var/lib/systemd", "/var/lib/sudo", "/var/lib/snapd",
	"/opt/homebrew", "/opt/local",
	"/System", "/Library", "/Applications", "/private/etc", "/private/var/db", "/private/var/log", "/private/var/root",
}

// systemRoots hold projects on servers and in containers (/srv/app,
// /opt/build, /var/tmp/ci, /var/lib/jenkins, /mnt/data): a folder below
// them may be writable, the root itself never.
var systemRoots = []string{"/var", "/var/lib", "/opt", "/srv", "/mnt", "/media", "/home", "/root", "/private", "/private/var", "/Users", "/Volumes"}

// HomeRefused are paths under the home that allow_write may never name:
// credentials, shell start-up files, agents' own settings, kusaw's store.
var HomeRefused = []string{
	".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".netrc", ".git-credentials",
	".password-store", ".config/gh", ".npmrc", ".pypirc",
	".bashrc", ".bash_profile", ".profile", ".zshrc", ".zprofile", ".zshenv", ".config/fish",
	".config", "Library", ".claude", ".claude.json", ".cursor", ".codex", ".gemini",
	".config/kusaw", ".local/share/kusaw",
}

// Check refuses p as a folder a sandboxed step may write when it would
// let the step change the system, the home (home, "" when unknown),
// credentials or what starts programs.
func Check(p, home string) error {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if p == "/" {
		return fmt.Errorf("%s is the root of the disk", p)
	}
	for _, s := range systemDirs {
		if p == s || strings.HasPrefix(p, s+"/") {
			return fmt.Errorf("%s is a system directory", p)
		}
	}
	for _, s := range systemRoots {
		if p == s {
			return fmt.Errorf("%s is a system directory (a project folder below it is fine)", p)
		}
	}
	if home != "" {
		home = filepath.Clean(home)
		if p == home || strings.HasPrefix(home, p+"/") {
			return fmt.Errorf("%s is the home directory or above it", p)
		}
		for _, r := range HomeRefused {
			rp := filepath.Join(home, r)
			if p == rp || strings.HasPrefix(p, rp+"/") {
				return fmt.Errorf("%s is a credential, start-up or agent settings path", p)
			}
		}
	}
	return nil
}
