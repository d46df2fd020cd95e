package proc

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Alive reports a process that exists and is not a zombie waiting for its
// parent to reap it.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		// No procfs (macOS): the signal test is all there is.
		return true
	}
	if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}
