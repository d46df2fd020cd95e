//go:build !linux

package proc

import "os/exec"

// ReapArg is the argument a binary's main passes to MaybeReap.
const ReapArg = "__kusaw_reap"

// EnableReaper does nothing here: no child subreaper; recovery ends what
// an interrupted attempt left (EndGroup).
func EnableReaper(path string) {}

// Reaped leaves cmd as it is.
func Reaped(cmd *exec.Cmd) {}

// MaybeReap does nothing here.
func MaybeReap(args []string) {}
