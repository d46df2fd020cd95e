// Package bridgebuild builds kusaw-bridge for tests and benchmarks as make
// build does: with its confinement stage in C (cgo, glibc linked
// statically) when a C compiler with a static C library is here, else the
// Go stage (CGO_ENABLED=0). Tests that hold both stages to one behaviour
// build each by name.
package bridgebuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// StaticCC says whether the C stage can be built here: a C compiler that
// has a static C library (gcc and libc6-dev on Debian).
func StaticCC() bool {
	if runtime.GOOS != "linux" {
		return false
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out, err := exec.Command(cc, "-print-file-name=libc.a").Output()
	if err != nil {
		return false
	}
	p := strings.TrimSpace(string(out))
	_, err = os.Stat(p)
	return filepath.IsAbs(p) && err == nil
}

// Build builds kusaw-bridge to dst, with the C stage when withC (the caller
// checks StaticCC first), stripped as make build does. root is the
// module's folder ("" for the current one).
func Build(root, dst string, withC bool) error {
	args := []string{"build", "-ldflags", "-s -w", "-o", dst}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if withC {
		args = []string{"build", "-tags", "netgo,osusergo", "-ldflags", "-s -w -linkmode external -extldflags -static", "-o", dst}
		env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=-buildvcs=false")
	}
	cmd := exec.Command("go", append(args, "github.com/kusaw/kusaw/cmd/kusaw-bridge")...)
	cmd.Dir = root
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building kusaw-bridge (C stage %v): %v\n%s", withC, err, out)
	}
	return nil
}

// BuildDefault builds kusaw-bridge as make build does here: the C stage
// when StaticCC, else the Go one. It says which.
func BuildDefault(root, dst string) (withC bool, err error) {
	withC = StaticCC()
	return withC, Build(root, dst, withC)
}
