package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kusaw/kusaw/internal/bridgebuild"
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
	// As make build does: kusaw and, beside it, kusaw-bridge and
	// kusaw-daemon (what kusaw serve and kusaw worker run as), statically
	// linked unless CGO_ENABLED says otherwise, without symbol tables. KUSAW_E2E_NO_BRIDGE=1
	// leaves the bridge out (kusaw then runs as its own bridge), to
	// measure the difference (docs/benchmarks.md).
	bins := []string{"kusaw", "kusaw-daemon", "kusaw-bridge"}
	if os.Getenv("KUSAW_E2E_NO_BRIDGE") == "1" {
		bins = bins[:2]
	}
	for _, c := range bins {
		if c == "kusaw-bridge" {
			// With its stage in C where a C compiler is, as make build
			// (CGO_ENABLED=0 asks for the Go stage).
			withC := bridgebuild.StaticCC() && os.Getenv("CGO_ENABLED") != "0"
			if err := bridgebuild.Build(root, filepath.Join(dir, c), withC); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			continue
		}
		// -s -w and kusaw's tags as make build: the start-up benchmarks
		// measure what users run.
		args := []string{"build", "-ldflags=-s -w", "-o", filepath.Join(dir, c)}
		if c == "kusaw" {
			args = append(args, "-tags", "kusaw_nogogit")
		}
		build := exec.Command("go", append(args, "./cmd/"+c)...)
		build.Dir = root
		build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		if os.Getenv("CGO_ENABLED") == "" {
			build.Env = append(build.Env, "CGO_ENABLED=0")
		}
		var out bytes.Buffer
		build.Stdout, build.Stderr = &out, &out
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", c, err, out.String())
			return 1
		}
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
