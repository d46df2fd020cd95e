package bridge

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Argv is the argv prefix that runs a step through the bridge; append the
// step's own argv. Given the kusaw binary it picks kusaw-bridge beside it
// when that is an executable file (make build and make install put it
// there), else kusaw's hidden __egress-bridge command, which does the same
// after the whole of kusaw has started.
func Argv(kusaw, leaseSocket, listen string, localPorts []int) []string {
	bin, sub := Binary(kusaw)
	argv := []string{bin}
	if sub {
		argv = append(argv, "__egress-bridge")
	}
	argv = append(argv, "--lease", leaseSocket, "--listen", listen)
	if len(localPorts) > 0 {
		ps := make([]string, len(localPorts))
		for i, p := range localPorts {
			ps[i] = strconv.Itoa(p)
		}
		argv = append(argv, "--local", strings.Join(ps, ","))
	}
	return append(argv, "--")
}

// Binary returns the program that runs the bridge and whether it is kusaw
// itself (then the hidden subcommand is needed).
func Binary(kusaw string) (string, bool) {
	if filepath.Base(kusaw) == BinaryName {
		return kusaw, false
	}
	p := filepath.Join(filepath.Dir(kusaw), BinaryName)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return p, false
	}
	return kusaw, true
}
