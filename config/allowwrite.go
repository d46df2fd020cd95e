package config

import (
	"os"

	"github.com/kusaw/kusaw/internal/allowwrite"
)

// CheckAllowWrite refuses allow_write entries (and the folder of kusaw
// sandbox exec) that would let a sandboxed step change the system, the
// home, credentials or what starts programs.
func CheckAllowWrite(p string) error {
	return checkAllowWrite(p, homeDir())
}

func homeDir() string {
	h, _ := os.UserHomeDir()
	return h
}

func checkAllowWrite(p, home string) error { return allowwrite.Check(p, home) }

// homeRefused are paths under the home that allow_write may never name.
var homeRefused = allowwrite.HomeRefused
