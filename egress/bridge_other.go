//go:build !linux

package egress

import (
	"errors"

	"github.com/kusaw/kusaw/egress/bridge"
)

// RunBridge exists only on Linux, where the sandbox has its own network
// namespace; elsewhere a lease listens on loopback itself (Listen).
func RunBridge(args []string) error { return bridge.Run(args) }

// HandOver is Linux-only.
func HandOver(socketPath string, listenerFD int, localFDs ...int) error {
	return bridge.HandOver(socketPath, listenerFD, localFDs...)
}

func (l *Lease) listenHandOver() error {
	return errors.New("egress lease: the bridge hand-over is Linux-only; set LeaseConfig.Listen")
}
