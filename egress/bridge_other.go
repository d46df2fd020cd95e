//go:build !linux

package egress

import "errors"

// BridgeError is a failure of the bridge before the step runs.
type BridgeError struct {
	Code int
	Msg  string
}

func (e *BridgeError) Error() string { return e.Msg }

// Exit statuses of the bridge when the step could not start.
const (
	BridgeExitHandOver = 125
	BridgeExitNoExec   = 126
	BridgeExitNotFound = 127
)

// RunBridge exists only on Linux, where the sandbox has its own network
// namespace; elsewhere a lease listens on loopback itself (Listen).
func RunBridge(args []string) error {
	return &BridgeError{BridgeExitHandOver, "egress bridge: only Linux sandboxes use the bridge"}
}

// HandOver is Linux-only.
func HandOver(socketPath string, listenerFD int, localFDs ...int) error {
	return errors.New("egress hand-over: only on Linux")
}

func (l *Lease) listenHandOver() error {
	return errors.New("egress lease: the bridge hand-over is Linux-only; set LeaseConfig.Listen")
}
