package providers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/status"
)

// Probe is what kusaw learned about a provider's CLI on this machine.
type Probe struct {
	Provider    string   `json:"provider"`
	Command     string   `json:"command"`         // as configured (or the default name)
	Path        string   `json:"path"`            // absolute path found
	RealPath    string   `json:"real_path"`       // Path with symlinks resolved
	InstallDir  string   `json:"install_dir"`     // RealPath's folder: the sandbox must be able to read it
	Version     string   `json:"version"`         // e.g. 2.1.197
	VersionLine string   `json:"version_line"`    // first line of `--version`
	Env         EnvNames `json:"env"`             // env names the CLI reads
	LoginPaths  []string `json:"login_paths"`     // its state folders for the current HOME
	EgressHosts []string `json:"egress_hosts"`    // what it needs to work
	Handshake   []string `json:"handshake_hosts"` // login/telemetry, never auto-allowed
}

// ProbeTimeout bounds one `--version` run.
const ProbeTimeout = 20 * time.Second

type probeKey struct {
	provider, path string
	size           int64
	mtime          time.Time
}

var (
	probeMu    sync.Mutex
	probeCache = map[probeKey]Probe{}
	probeRuns  int // `--version` runs, for tests of the cache
)

var versionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\d+\.\d+(?:\.\d+)?(?:[-+][0-9A-Za-z.-]+)?`) })

// probe resolves command (or the spec's names), runs `--version` unless
// this binary was probed before, and fills in the spec's static data.
// Found under a default name, a binary whose version line the spec does
// not recognise is passed over: `agent` is a common name, and another
// vendor's CLI must not get Cursor's flags.
func probe(ctx context.Context, spec Spec, command string) (Probe, error) {
	return probeAvoiding(ctx, spec, command, nil)
}

// probeAvoiding is probe that also refuses a CLI inside one of writable
// (besides every provider's login folders): what a sandbox may write.
func probeAvoiding(ctx context.Context, spec Spec, command string, writable []string) (Probe, error) {
	paths, err := resolveCommand(spec, command)
	if err != nil {
		return Probe{}, err
	}
	roots := writableRoots(writable)
	var foreign []string
	for _, path := range paths {
		p, err := probeBinary(ctx, spec, path, roots)
		if err != nil {
			return Probe{}, err
		}
		if command == "" && spec.Recognize != nil && !spec.Recognize(p.VersionLine) {
			foreign = append(foreign, fmt.Sprintf("%s (--version: %q)", path, p.VersionLine))
			continue
		}
		p.Command = command
		if p.Command == "" {
			p.Command = filepath.Base(path)
		}
		p.Path = path
		p.Env = spec.Env
		home, _ := os.UserHomeDir()
		p.LoginPaths = spec.LoginPaths(home, os.Getenv)
		p.EgressHosts = append([]string(nil), spec.EgressHosts...)
		p.Handshake = append([]string(nil), spec.HandshakeHosts...)
		return p, nil
	}
	return Probe{}, &status.Error{Reason: status.ReasonProviderMissing,
		Msg: fmt.Sprintf("%s: found only other programs of the same name: %s", spec.Name, strings.Join(foreign, "; ")),
		Fix: fmt.Sprintf("%s; or set providers.%s.command to its path", spec.Install, spec.Name)}
}

// probeBinary runs `--version` once per binary (resolved path, size, mtime).
func probeBinary(ctx context.Context, spec Spec, path string, roots []writableRoot) (Probe, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	// Before the cache too: a result probed before the folder became
	// writable does not make the binary there safe to run later.
	if err := refuseWritable(spec, path, real, roots); err != nil {
		return Probe{}, err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return Probe{}, status.Errorf(status.ReasonProviderMissing, "%s: cannot stat %s: %v", spec.Name, path, err)
	}
	key := probeKey{spec.Name, real, fi.Size(), fi.ModTime()}
	probeMu.Lock()
	p, ok := probeCache[key]
	probeMu.Unlock()
	if ok {
		return p, nil
	}
	line, err := runVersion(ctx, spec.Name, path)
	if err != nil {
		return Probe{}, err
	}
	p = Probe{
		Provider:    spec.Name,
		RealPath:    real,
		InstallDir:  filepath.Dir(real),
		VersionLine: line,
		Version:     versionRE().FindString(line),
	}
	probeMu.Lock()
	probeCache[key] = p
	probeRuns++
	probeMu.Unlock()
	return p, nil
}

// resolveCommand finds the CLI: a configured name or path, else every
// default and alternative name found on PATH, in order.
func resolveCommand(spec Spec, command string) ([]string, error) {
	names := []string{command}
	if command == "" {
		names = append([]string{spec.DefaultCommand}, spec.AltCommands...)
	}
	fix := fmt.Sprintf("%s; or set providers.%s.command to its path", spec.Install, spec.Name)
	var found []string
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err == nil {
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, err
			}
			found = append(found, abs)
			continue
		}
		if command != "" {
			return nil, &status.Error{Reason: status.ReasonProviderMissing,
				Msg: fmt.Sprintf("%s: command %q not found or not executable (%v)", spec.Name, command, unwrapExec(err)), Fix: fix}
		}
	}
	if len(found) == 0 {
		return nil, &status.Error{Reason: status.ReasonProviderMissing,
			Msg: fmt.Sprintf("%s: none of %s is on PATH", spec.Name, strings.Join(names, ", ")), Fix: fix}
	}
	return found, nil
}

func unwrapExec(err error) error {
	var e *exec.Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}

// runVersion runs `path --version` and returns its first non-empty line.
func runVersion(ctx context.Context, name, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = append(os.Environ(), "DISABLE_AUTOUPDATER=1", "NO_COLOR=1")
	var out, errb bytes.Buffer
	cmd.Stdout = &capWriter{b: &out, n: 64 << 10}
	cmd.Stderr = &capWriter{b: &errb, n: 64 << 10}
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", status.Errorf(status.ReasonProviderMissing, "%s: `%s --version` did not finish within %s", name, path, ProbeTimeout)
	}
	if err != nil {
		msg := firstLine(errb.String())
		if msg == "" {
			msg = firstLine(out.String())
		}
		return "", status.Errorf(status.ReasonProviderMissing, "%s: `%s --version` failed: %v: %s", name, path, err, msg)
	}
	line := firstLine(out.String())
	if line == "" {
		line = firstLine(errb.String())
	}
	if line == "" {
		return "", status.Errorf(status.ReasonProviderMissing, "%s: `%s --version` printed nothing", name, path)
	}
	return line, nil
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			t, _ := truncate(l, 200)
			return t
		}
	}
	return ""
}

// capWriter keeps the first n bytes and drops the rest.
type capWriter struct {
	b *bytes.Buffer
	n int
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.n - w.b.Len(); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		w.b.Write(p[:room])
	}
	return len(p), nil
}
