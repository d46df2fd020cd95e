package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// kusawBin is the kusaw binary every e2e test runs, built once by TestMain.
var kusawBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kusaw-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kusawBin = filepath.Join(dir, "kusaw")
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(self))
	build := exec.Command("go", "build", "-o", kusawBin, "./cmd/kusaw")
	build.Dir = root
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	var out bytes.Buffer
	build.Stdout, build.Stderr = &out, &out
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building kusaw: %v\n%s", err, out.String())
		return 1
	}
	return m.Run()
}

// need skips a test when a tool is missing, except in CI, where a missing
// tool fails it.
func need(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (CI must have it)", tool)
		}
		t.Skipf("%s is not installed", tool)
	}
}
