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

func standInPoolDir() string {
	switch StandInPool {
	case "off":
		return ""
	case "":
	default:
		return filepath.Clean(StandInPool)
	}
	d, err := os.UserCacheDir()
	if err != nil || !filepath.IsAbs(d) {
		return ""
	}
	return filepath.Join(d, "kusaw", "stand-ins")
}
