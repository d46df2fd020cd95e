package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The worker's container image (deploy/worker/Containerfile, docs/cluster.md
// "A worker in a container").

// containerfile is deploy/worker/Containerfile and the run flags its labels
// name, per runtime.
func containerfile(t *testing.T) (string, map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "worker", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string][]string{}
	for _, m := range regexp.MustCompile(`io\.kusaw\.run-flags\.(\w+)="([^"]*)"`).FindAllStringSubmatch(string(b), -1) {
		flags[m[1]] = strings.Fields(m[2])
	}
	if len(flags["docker"]) == 0 || len(flags["podman"]) == 0 {
		t.Fatalf("the Containerfile's labels name no run flags for docker and podman: %v", flags)
	}
	return string(b), flags
}

// What the docs tell an operator to run is what the image says it needs,
// and the image's command is one kusaw takes. This part needs no
// container runtime.
func TestWorkerContainerfileMatchesDocs(t *testing.T) {
	text, flags := containerfile(t)
	docs := readFile(t, filepath.Join(repoRoot(), "docs", "cluster.md"))
	for rt, fs := range flags {
		if !strings.Contains(docs, strings.Join(fs, " ")) {
			t.Errorf("docs/cluster.md does not give the %s run flags the image names: %s", rt, strings.Join(fs, " "))
		}
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT \["kusaw", "worker", "--state-dir", "([^"]+)"\]`).FindStringSubmatch(text)
	if m == nil || !strings.Contains(text, "VOLUME "+m[1]) {
		t.Fatalf("the image's ENTRYPOINT is not kusaw worker --state-dir on its volume:\n%s", text)
	}
	if res := runKusaw(t, t.TempDir(), "worker", "--help"); res.code != 0 || !strings.Contains(res.stdout, "--state-dir") || !strings.Contains(res.stdout, "--name") {
		t.Errorf("kusaw worker --help: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	for _, want := range []string{"bubblewrap", "git", "USER kusaw", "COPY bin/kusaw bin/kusaw-bridge bin/kusaw-daemon"} {
		if !strings.Contains(text, want) {
			t.Errorf("the Containerfile lacks %q", want)
		}
	}
}

// containerRuntime is the first of podman and docker that answers (a
// client without its daemon does not), and why none does.
func containerRuntime() (string, string) {
	var why []string
	for _, rt := range []string{"podman", "docker"} {
		if _, err := exec.LookPath(rt); err != nil {
			why = append(why, rt+": not installed")
			continue
		}
		out, err := exec.Command(rt, "info").CombinedOutput()
		if err != nil {
			why = append(why, rt+" info: "+lastLines(string(out), 1))
			continue
		}
		return rt, ""
	}
	return "", strings.Join(why, "; ")
}

// Where a container runtime runs, the image is built from the binaries
// the e2e tests use, runs as a user that is not root, and kusaw sandbox
// check passes inside it with the documented flags; without them it
// fails (the flags are what bubblewrap needs, no more guessed ones).
func TestWorkerContainerImage(t *testing.T) {
	rt, why := containerRuntime()
	if rt == "" {
		// No runtime to build with (the brief: build it only where one is
		// present); the Containerfile's text is still checked by
		// TestWorkerContainerfileMatchesDocs.
		t.Skipf("NOT BUILT: no container runtime answers here (%s); deploy/worker/Containerfile was not built or run", why)
	}
	_, flags := containerfile(t)
	ctx := t.TempDir()
	os.MkdirAll(filepath.Join(ctx, "bin"), 0o755)
	for _, b := range []string{"kusaw", "kusaw-bridge", "kusaw-daemon"} {
		src := filepath.Join(filepath.Dir(kusawBin), b)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("%s: %v (the image needs the three programs)", src, err)
		}
		os.WriteFile(filepath.Join(ctx, "bin", b), data, 0o755)
	}
	tag := "kusaw-worker-e2e:" + time.Now().Format("20060102150405")
	build := exec.Command(rt, "build", "-f", filepath.Join(repoRoot(), "deploy", "worker", "Containerfile"), "-t", tag, ctx)
	out, err := build.CombinedOutput()
	if err != nil {
		msg := "building the worker image with " + rt + " (its base image, debian:12-slim, must be pullable or present): " + err.Error() + "\n" + lastLines(string(out), 15)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("NOT BUILT: " + msg)
	}
	t.Cleanup(func() { _ = exec.Command(rt, "rmi", "-f", tag).Run() })
	t.Logf("built the worker image with %s as %s", rt, tag)
	id, err := exec.Command(rt, "run", "--rm", "--entrypoint", "id", tag, "-u").CombinedOutput()
	if err != nil || strings.TrimSpace(string(id)) == "0" {
		t.Errorf("the image's user: %q %v, want not root", id, err)
	}
	run := func(extra []string) ([]byte, error) {
		args := append([]string{"run", "--rm"}, extra...)
		args = append(args, "--entrypoint", "kusaw", tag, "sandbox", "check")
		return exec.Command(rt, args...).CombinedOutput()
	}
	if out, err := run(flags[rt]); err != nil {
		t.Errorf("kusaw sandbox check in the image with %v: %v\n%s", flags[rt], err, out)
	}
	if out, err := run(nil); err == nil {
		t.Errorf("kusaw sandbox check passed without the documented flags (they would not be needed):\n%s", out)
	}
}
