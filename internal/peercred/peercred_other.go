//go:build !linux && !darwin

package peercred

import "net"

// HostPeer refuses every peer: kusaw cannot tell a sandboxed one here.
func HostPeer(*net.UnixConn) error {
	return refused("kusaw cannot read a peer's credentials on this system")
}

// Descends refuses every peer.
func Descends(int) Rule { return HostPeer }

// HostOrDescends refuses every peer.
func HostOrDescends(int) Rule { return HostPeer }
