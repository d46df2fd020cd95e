package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"
)

// x32 calls (bit 30) are killed like a foreign architecture.
func TestSeccompKillsX32(t *testing.T) {
	if got := runFilter(t, auditArch, 0x40000000|unix.SYS_READ); got != retKill {
		t.Errorf("x32 read: %#x, want kill", got)
	}
}
