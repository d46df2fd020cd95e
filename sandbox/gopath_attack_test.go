package sandbox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestViewGoPathIsNotAToolchain: ~/go/bin, where go install puts
// programs, is on most Go developers' PATH. Its folder above is GOPATH,
// not a program's tree: src/ holds other repositories checked out the old
// way and pkg/mod the sources of private modules. A step reads neither;
// the twin: the program in ~/go/bin runs, and a Go toolchain installed in
// the home (~/sdk/go1.x, with its VERSION and src/) is still seen whole.
func TestViewGoPathIsNotAToolchain(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bubblewrap's view")
	}
	needSandbox(t, "the attack runs the real sandbox")
	f := newFixture(t)
	gp := filepath.Join(f.home, "go")
	write(t, filepath.Join(gp, "bin", "mytool"), "#!/bin/sh\necho TOOL-RAN\n")
	os.Chmod(filepath.Join(gp, "bin", "mytool"), 0o755)
	other := filepath.Join(gp, "src", "github.com", "corp", "private", "secret.go")
	write(t, other, "OTHER-REPO-SOURCE\n")
	mod := filepath.Join(gp, "pkg", "mod", "corp.example", "internal@v1.0.0", "key.go")
	write(t, mod, "PRIVATE-MODULE-SOURCE\n")
	sdk := filepath.Join(f.home, "sdk", "go1.99")
	write(t, filepath.Join(sdk, "VERSION"), "go1.99\n")
	write(t, filepath.Join(sdk, "pkg", "tool", "linux_amd64", "compile"), "")
	write(t, filepath.Join(sdk, "src", "runtime", "runtime.go"), "GOROOT-SOURCE\n")
	write(t, filepath.Join(sdk, "bin", "go99"), "#!/bin/sh\necho GO99-RAN\n")
	os.Chmod(filepath.Join(sdk, "bin", "go99"), 0o755)
	f.path = filepath.Join(gp, "bin") + ":" + filepath.Join(sdk, "bin") + ":/usr/bin:/bin"

	p := mustPlan(t, f.input())
	t.Cleanup(func() { p.Cleanup() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	script := `cat "$1" "$2" 2>/dev/null; mytool; go99; cat "$3"`
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", script, "sh", other, mod, filepath.Join(sdk, "src", "runtime", "runtime.go")})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running bwrap: %v", err)
		}
	}
	got := out.String()
	for _, secret := range []string{"OTHER-REPO-SOURCE", "PRIVATE-MODULE-SOURCE"} {
		if strings.Contains(got, secret) {
			t.Errorf("the step read %s through the GOPATH above ~/go/bin:\n%s", secret, got)
		}
	}
	for _, want := range []string{"TOOL-RAN", "GO99-RAN", "GOROOT-SOURCE"} {
		if !strings.Contains(got, want) {
			t.Errorf("the legitimate use lacks %s:\n%s", want, got)
		}
	}
}
