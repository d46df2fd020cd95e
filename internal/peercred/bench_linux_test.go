package peercred

import (
	"net"
	"path/filepath"
	"testing"
)

// BenchmarkHostPeer is what serve's socket adds to one connection: a
// connection accepted and checked (SO_PEERCRED, pidfd, two namespace
// stats, the liveness signal) against one accepted only, in the same run.
func BenchmarkHostPeer(b *testing.B) {
	for _, tc := range []struct {
		name  string
		check bool
	}{{"accept", false}, {"accept+HostPeer", true}} {
		b.Run(tc.name, func(b *testing.B) {
			sock := filepath.Join(b.TempDir(), "s.sock")
			ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			for b.Loop() {
				c, err := net.Dial("unix", sock)
				if err != nil {
					b.Fatal(err)
				}
				s, err := ln.AcceptUnix()
				if err != nil {
					b.Fatal(err)
				}
				if tc.check {
					if err := HostPeer(s); err != nil {
						b.Fatal(err)
					}
				}
				s.Close()
				c.Close()
			}
		})
	}
}
