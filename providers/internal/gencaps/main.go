// Command gencaps writes docs/reference/capabilities.md from the providers
// package's capability matrix. Run it with `go generate ./providers`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kusaw/kusaw/providers"
)

func main() {
	out := flag.String("o", "docs/reference/capabilities.md", "file to write")
	flag.Parse()
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gencaps:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, []byte(providers.CapabilitiesMarkdown()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gencaps:", err)
		os.Exit(1)
	}
}
