package egress

import "github.com/kusaw/kusaw/egress/bridge"

// BridgeError is a failure of the bridge before the step runs.
type BridgeError = bridge.Error

// Exit statuses of the bridge when the step could not start.
const (
	BridgeExitHandOver = bridge.ExitHandOver
	BridgeExitNoExec   = bridge.ExitNoExec
	BridgeExitNotFound = bridge.ExitNotFound
)
