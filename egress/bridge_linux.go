package egress

import "github.com/kusaw/kusaw/egress/bridge"

// RunBridge is kusaw __egress-bridge: the bridge of package egress/bridge,
// for a kusaw installed without kusaw-bridge beside it.
func RunBridge(args []string) error { return bridge.Run(args) }

// HandOver sends a listening socket (and local-service listeners) to a
// lease's Unix socket and waits for the proxy's answer. The bridge uses
// it; so can a test.
func HandOver(socketPath string, listenerFD int, localFDs ...int) error {
	return bridge.HandOver(socketPath, listenerFD, localFDs...)
}
