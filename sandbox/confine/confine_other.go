//go:build !linux

package confine

import (
	"errors"
	"runtime"
)

var errNotLinux = errors.New("confine: Landlock and session keyrings are Linux's; " + runtime.GOOS + " has neither")

// Run: the stage exists on Linux only.
func Run(args []string) error { return &Error{ExitSetup, errNotLinux.Error()} }

// Apply: the stage exists on Linux only.
func Apply(writable []string) error { return &Error{ExitSetup, errNotLinux.Error()} }

// LandlockABI: none outside Linux.
func LandlockABI() (int, error) { return 0, errNotLinux }

// LayerCaps: none outside Linux.
var LayerCaps []uintptr

// RunLayer: overlays are Linux's.
func RunLayer(args []string) error {
	return &Error{ExitLayer, "layer: a write layer is an overlay mount, which " + runtime.GOOS + " lacks"}
}
