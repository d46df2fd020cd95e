//go:build !linux

package bridge

import "errors"

// Run exists only on Linux, where the sandbox has its own network
// namespace; elsewhere a lease listens on loopback itself.
func Run(args []string) error {
	return &Error{ExitHandOver, "egress bridge: only Linux sandboxes use the bridge"}
}

// RunThen exists only on Linux, as Run.
func RunThen(args []string, before func() error) error { return Run(args) }

// HandOver is Linux-only.
func HandOver(socketPath string, listenerFD int, localFDs ...int) error {
	return errors.New("egress hand-over: only on Linux")
}
