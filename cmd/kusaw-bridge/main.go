// Command kusaw-bridge is the first process inside a Linux sandbox with
// network: allowlist (package egress/bridge). It is installed beside kusaw
// and does what kusaw __egress-bridge does, without starting the whole of
// kusaw first.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/kusaw/kusaw/egress/bridge"
)

func main() {
	err := bridge.Run(os.Args[1:])
	var be *bridge.Error
	code := bridge.ExitHandOver
	if errors.As(err, &be) {
		code = be.Code
	}
	fmt.Fprintf(os.Stderr, "kusaw: %v\n", err)
	os.Exit(code)
}
