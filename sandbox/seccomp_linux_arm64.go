package sandbox

import "golang.org/x/sys/unix"

// 32-bit arm processes report AUDIT_ARCH_ARM and are killed by the check.
const auditArch = unix.AUDIT_ARCH_AARCH64

// Every number is an arm64 call: none is killed for its number.
var archKilled [][2]uint32

var (
	archAllowed []uintptr
	archRefused []uintptr
)

// seccompPrebuilt: none on arm64, where no test runs to check one against
// seccompProgram; the filter is built at the first start.
const seccompPrebuilt = ""
