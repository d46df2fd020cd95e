package confine

import (
	"math"

	"golang.org/x/sys/unix"
)

const fdDir = "/proc/self/fd"

// closeRange is unix.CloseRange; a test replaces it to take the fallback.
var closeRange = unix.CloseRange

// closeRangeCloexec marks 3 and up in one call; ENOSYS before Linux 5.9,
// EINVAL for the flag before 5.11.
func closeRangeCloexec() error { return closeRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) }
