package record

import (
	"os"
	"sync/atomic"
)

// Modes of what kusaw writes under state_dir. By default everything is
// private to kusaw's user (0700 folders, 0600 files): records hold prompts,
// outputs and egress decisions. state_dir_mode widens them for a factory
// that shares its records with a group (SetStateDirMode).
const (
	DefaultDirMode os.FileMode = 0o700
)

var dirMode atomic.Uint32

func init() { dirMode.Store(uint32(DefaultDirMode)) }

// SetStateDirMode sets the folder mode of the state directory (state_dir_mode);
// files get the same bits without execute. 0 restores the default.
func SetStateDirMode(m os.FileMode) {
	if m == 0 {
		m = DefaultDirMode
	}
	dirMode.Store(uint32(m.Perm() | 0o700))
}

// DirMode is the mode of a folder kusaw makes under state_dir.
func DirMode() os.FileMode { return os.FileMode(dirMode.Load()) }

// FileMode is the mode of a file kusaw writes under state_dir.
func FileMode() os.FileMode { return DirMode() &^ 0o111 }
