// Command kusaw is a software factory's step executor. This package only
// parses flags and prints; the work is done by the packages it calls.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
