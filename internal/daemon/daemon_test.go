//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The test binary plays both sides: with KUSAW_TEST_HANDOVER it is kusaw
// handing over (Exec replaces it with itself), and started as the daemon
// ("serve --spec-fd N") it prints the spec it read and its command line.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "worker") {
		s, err := Read(os.Args[1:])
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(3)
		}
		cmdline, _ := os.ReadFile("/proc/self/cmdline")
		json.NewEncoder(os.Stdout).Encode(map[string]any{"spec": s, "cmdline": strings.ReplaceAll(string(cmdline), "\x00", " ")})
		os.Exit(0)
	}
	if v := os.Getenv("KUSAW_TEST_HANDOVER"); v != "" {
		var s Spec
		json.Unmarshal([]byte(v), &s)
		os.Unsetenv("KUSAW_TEST_HANDOVER")
		exe, _ := os.Executable()
		err := Exec(exe, s)
		os.Stderr.WriteString("Exec returned: " + err.Error() + "\n")
		os.Exit(4)
	}
	os.Exit(m.Run())
}

func handOver(t *testing.T, s Spec) (Spec, string) {
	t.Helper()
	b, _ := json.Marshal(s)
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "KUSAW_TEST_HANDOVER="+string(b))
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("hand-over: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var got struct {
		Spec    Spec   `json:"spec"`
		Cmdline string `json:"cmdline"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return got.Spec, got.Cmdline
}

// What kusaw decided reaches the daemon whole, and the secrets in it
// (serve's token, a worker's join token) are not on its command line,
// where every local user would see them.
func TestHandOverCarriesTheSpec(t *testing.T) {
	for _, s := range []Spec{
		{Command: "serve", Kusaw: "/usr/local/bin/kusaw", Version: "v1.2.3", Commit: "abc", ProbeCache: "/tmp/p",
			Serve: &Serve{Factory: "/f/factory.yaml", StateDir: "/f/.kusaw", LogLevel: "debug", LogFormat: "text", Color: true,
				Listen: "127.0.0.1:8080", Token: "s3cret-serve-token", MaxParallel: 3, Grace: 30 * time.Second, KillGrace: time.Second}},
		{Command: "worker", Kusaw: "/k", Version: "devel",
			Worker: &Worker{StateDir: "/w", Name: "w1", Join: "kusaw-join-1.s3cret", Pools: []string{"gpu"}, PoolsSet: true,
				MaxParallel: 2, MaxParallelSet: true, DrainTimeout: 10 * time.Minute}},
	} {
		got, cmdline := handOver(t, s)
		if !reflect.DeepEqual(got, s) {
			t.Errorf("the daemon read\n%+v\nkusaw sent\n%+v", got, s)
		}
		if strings.Contains(cmdline, "s3cret") || !strings.Contains(cmdline, s.Command+" "+SpecFlag+" ") {
			t.Errorf("the daemon's command line: %q", cmdline)
		}
	}
}

// Bad starts are refused with a line that says what to run instead.
func TestReadRefuses(t *testing.T) {
	for _, args := range [][]string{nil, {"serve"}, {"serve", "--spec", "5"}, {"serve", SpecFlag, "x"}, {"serve", SpecFlag, "1"}} {
		if _, err := Read(args); err == nil {
			t.Errorf("Read(%q) took it", args)
		}
	}
	if _, err := Read([]string{"serve"}); err == nil || !strings.Contains(err.Error(), "kusaw serve --help") {
		t.Errorf("by hand: %v", err)
	}
	// A spec for another command than the daemon was started as.
	r, w, _ := os.Pipe()
	w.Write([]byte(`{"command":"worker","worker":{}}`))
	w.Close()
	defer r.Close()
	if _, err := Read([]string{"serve", SpecFlag, itoa(int(r.Fd()))}); err == nil || !strings.Contains(err.Error(), `not "serve"`) {
		t.Errorf("a worker's spec read as serve: %v", err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// kusaw-daemon is found beside kusaw only (symbolic links resolved), and
// must be an executable file.
func TestPath(t *testing.T) {
	dir := t.TempDir()
	kusaw := filepath.Join(dir, "bin", "kusaw")
	os.MkdirAll(filepath.Dir(kusaw), 0o755)
	os.WriteFile(kusaw, []byte("#!/bin/sh\n"), 0o755)
	if _, err := Path(kusaw); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), filepath.Join(dir, "bin", Program)) {
		t.Fatalf("no daemon: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "bin", Program), []byte("x"), 0o644)
	if _, err := Path(kusaw); !errors.Is(err, ErrMissing) {
		t.Fatalf("a daemon that is not executable: %v", err)
	}
	os.Chmod(filepath.Join(dir, "bin", Program), 0o755)
	link := filepath.Join(dir, "kusaw")
	os.Symlink(kusaw, link)
	if p, err := Path(link); err != nil || p != filepath.Join(dir, "bin", Program) {
		t.Fatalf("through a link: %q %v", p, err)
	}
}
