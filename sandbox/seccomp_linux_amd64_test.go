package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"
)

// x32 calls (bit 30) are killed like a foreign architecture.
func TestSeccompKillsX32(t *testing.T) {
	for _, nr := range []uint32{0x40000000 | unix.SYS_READ, 0x40000000 | unix.SYS_GETPID, 0xfffffffe} {
		if got := runFilter(t, auditArch, nr); got != retKill {
			t.Errorf("x32 call %#x: %#x, want kill", nr, got)
		}
	}
}
