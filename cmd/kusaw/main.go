// Command kusaw is a software factory's step executor. This package only
// parses flags and prints; the work is done by the packages it calls.
package main

import (
	"os"

	"github.com/kusaw/kusaw/internal/proc"
)

func main() {
	// A copy of kusaw started as a step's reaper does only that.
	proc.MaybeReap(os.Args)
	if exe, err := os.Executable(); err == nil {
		proc.EnableReaper(exe)
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
