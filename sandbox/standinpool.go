package sandbox

import (
	"os"
	"path/filepath"
	"sync/atomic"
)

// StandInPool is the folder of spare stand-in folders: "" for kusaw's
// cache folder (<user cache folder>/kusaw/stand-ins), "off" for none.
var StandInPool string

// standInPoolMax bounds the spare folders kept.
const standInPoolMax = 64

// poolUnsafe turns the pool off in this process: a plan showed the pool's
// folder and could not hide it.
var poolUnsafe atomic.Bool

func standInPoolDir() string { return CacheFile(StandInPool, "stand-ins") }

// CacheFile is where kusaw keeps one of its caches, name, for a setting
// that may move it: "" is <user cache folder>/kusaw/name, "off" none
// (""), anything else that path.
func CacheFile(setting, name string) string {
	switch setting {
	case "off":
		return ""
	case "":
	default:
		return filepath.Clean(setting)
	}
	d, err := os.UserCacheDir()
	if err != nil || !filepath.IsAbs(d) {
		return ""
	}
	return filepath.Join(d, "kusaw", name)
}
