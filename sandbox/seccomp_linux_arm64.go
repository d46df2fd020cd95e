package sandbox

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// 32-bit arm processes report AUDIT_ARCH_ARM and are killed by the check.
const auditArch = unix.AUDIT_ARCH_AARCH64

var archPrologue []bpf.Instruction

var (
	archAllowed []uintptr
	archRefused []uintptr
)
