package steps

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/kusaw/kusaw/internal/mountinfo"
)

// Builtins are the built-in steps, run as `kusaw __builtin NAME` inside the
// attempt's worktree (and sandbox, when it has one).
var Builtins = map[string]func(env Env, stdout, stderr io.Writer) int{
	"checks": runChecks,
	"diff":   runDiff,
}

// Env is what a built-in reads from its environment.
type Env struct {
	Worktrees map[string]string // repo env name → worktree path
	Bases     map[string]string // repo env name → run base commit
	Artifacts string
	Dir       string // working directory
	Getenv    func(string) string
}

// EnvFromOS reads a built-in's Env from the process environment.
func EnvFromOS() Env {
	e := Env{Worktrees: map[string]string{}, Bases: map[string]string{}, Artifacts: os.Getenv(EnvArtifacts), Getenv: os.Getenv}
	e.Dir, _ = os.Getwd()
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if n, ok := strings.CutPrefix(k, EnvWorktreePrefix); ok && v != "" {
			e.Worktrees[n] = v
		}
		if n, ok := strings.CutPrefix(k, EnvBasePrefix); ok && v != "" {
			e.Bases[n] = v
		}
	}
	return e
}

// RunBuiltin runs a built-in step and returns its exit status.
func RunBuiltin(name string, env Env, stdout, stderr io.Writer) int {
	fn, ok := Builtins[name]
	if !ok {
		names := make([]string, 0, len(Builtins))
		for n := range Builtins {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(stderr, "kusaw: unknown built-in step %q (built-in steps: %s)\n", name, strings.Join(names, ", "))
		return 2
	}
	return fn(env, stdout, stderr)
}

// worktreeList returns the worktrees in a stable order, or the working
// directory alone when none is named (a built-in run by hand).
func (e Env) worktreeList() [][2]string {
	var out [][2]string
	for n, p := range e.Worktrees {
		out = append(out, [2]string{n, p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	if len(out) == 0 && e.Dir != "" {
		out = append(out, [2]string{"", e.Dir})
	}
	return out
}

// TestCommand detects a repository's own test command, installing its
// dependencies first where the tests need them (Detect).
func TestCommand(dir string) (argv []string, why string) {
	if e, ok := Detect(dir); ok {
		return e.Test, e.Why
	}
	return nil, ""
}

var makeTestTarget = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^test\s*:`) })

func readSmall(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// checkResult is one repo's line in artifacts/checks.json.
type checkResult struct {
	Repo     string   `json:"repo,omitempty"`
	Dir      string   `json:"dir"`
	Command  []string `json:"command,omitempty"`
	Detected string   `json:"detected_from,omitempty"`
	Exit     int      `json:"exit"`
	Note     string   `json:"note,omitempty"`
}

// runChecks runs each worktree's own test command. It fails when any test
// command fails; a repo with no test command is noted, not failed.
func runChecks(env Env, stdout, stderr io.Writer) int {
	var results []checkResult
	failed, ran := 0, 0
	for _, wt := range env.worktreeList() {
		r := checkResult{Repo: wt[0], Dir: wt[1]}
		argv, why := TestCommand(wt[1])
		if argv == nil {
			r.Note = "no test command found (looked for a Makefile test target, go.mod, a package.json test script, Cargo.toml, pyproject.toml)"
			fmt.Fprintf(stdout, "checks: %s: %s\n", label(wt), r.Note)
			results = append(results, r)
			continue
		}
		r.Command, r.Detected = argv, why
		fmt.Fprintf(stdout, "checks: %s: running %s (%s)\n", label(wt), strings.Join(argv, " "), why)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = wt[1]
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Env = toolEnv(env)
		ran++
		if err := cmd.Run(); err != nil {
			r.Exit = exitStatus(err)
			r.Note = err.Error()
			failed++
			fmt.Fprintf(stdout, "checks: %s: FAILED (%v)\n", label(wt), err)
		} else {
			fmt.Fprintf(stdout, "checks: %s: ok\n", label(wt))
		}
		results = append(results, r)
	}
	if env.Artifacts != "" {
		b, _ := json.MarshalIndent(map[string]any{"ran": ran, "failed": failed, "repos": results}, "", "  ")
		if err := os.WriteFile(filepath.Join(env.Artifacts, "checks.json"), append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "checks: cannot write checks.json: %v\n", err)
			return 1
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "checks: %d of %d test commands failed\n", failed, ran)
		return 1
	}
	return 0
}

// toolEnv is the test command's environment. In the sandbox the home is
// hidden and read-only, so Go's module cache (default ~/go) moves to the
// private temp folder unless GOPATH or GOMODCACHE says otherwise.
func toolEnv(env Env) []string {
	out := os.Environ()
	if env.Getenv == nil || env.Getenv("GOPATH") != "" || env.Getenv("GOMODCACHE") != "" {
		return out
	}
	tmp := env.Getenv("TMPDIR")
	home := env.Getenv("HOME")
	if tmp == "" || (home != "" && writable(home)) {
		return out
	}
	return append(out, "GOPATH="+filepath.Join(tmp, "go"))
}

func writable(dir string) bool {
	f, err := os.CreateTemp(dir, ".kusaw-probe-")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

func label(wt [2]string) string {
	if wt[0] == "" {
		return wt[1]
	}
	return strings.ToLower(wt[0])
}

func exitStatus(err error) int {
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
		return ee.ExitCode()
	}
	return 127
}

// runDiff writes each worktree's changes since the run's base (commits of
// earlier steps and whatever is uncommitted, untracked files included) as
// artifacts/<repo>.patch and artifacts/<repo>.diffstat. It reads through a
// private index in TMPDIR, so the worktree's own index is not touched.
func runDiff(env Env, stdout, stderr io.Writer) int {
	if env.Artifacts == "" {
		fmt.Fprintf(stderr, "diff: %s is not set; run it as a step of a pipeline\n", EnvArtifacts)
		return 2
	}
	status := 0
	for _, wt := range env.worktreeList() {
		name := strings.ToLower(wt[0])
		if name == "" {
			name = "worktree"
		}
		base := env.Bases[wt[0]]
		if base == "" {
			base = "HEAD"
		}
		patch, stat, err := worktreeDiff(wt[1], base, env.Getenv("TMPDIR"))
		if err != nil {
			fmt.Fprintf(stderr, "diff: %s: %v\n", name, err)
			status = 1
			continue
		}
		if err := os.WriteFile(filepath.Join(env.Artifacts, name+".patch"), patch, 0o644); err != nil {
			fmt.Fprintf(stderr, "diff: %v\n", err)
			status = 1
			continue
		}
		if err := os.WriteFile(filepath.Join(env.Artifacts, name+".diffstat"), stat, 0o644); err != nil {
			fmt.Fprintf(stderr, "diff: %v\n", err)
			status = 1
			continue
		}
		summary := lastLine(stat)
		if summary == "" {
			summary = "no changes"
		}
		fmt.Fprintf(stdout, "diff: %s: %s\n", name, summary)
	}
	return status
}

func worktreeDiff(dir, base, tmp string) (patch, stat []byte, err error) {
	idx, err := os.CreateTemp(tmp, "kusaw-diff-index-")
	if err != nil {
		return nil, nil, err
	}
	idx.Close()
	defer os.Remove(idx.Name())
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+idx.Name(), "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git %s: %s", args[0], firstLine(errb.String(), err))
		}
		return out, nil
	}
	if _, err := git("read-tree", "HEAD"); err != nil {
		return nil, nil, err
	}
	// Tracked changes, then untracked files except the sandbox's stand-ins
	// (empty read-only files it mounts over missing protected paths such as
	// .mcp.json; they vanish after the step).
	if _, err := git("add", "--update"); err != nil {
		return nil, nil, err
	}
	others, err := git("ls-files", "--others", "--exclude-standard", "-z")
	if err != nil {
		return nil, nil, err
	}
	var add []string
	mounts := mountPoints()
	for _, f := range strings.Split(string(others), "\x00") {
		if f != "" && !isStandIn(filepath.Join(dir, f), mounts) {
			add = append(add, f)
		}
	}
	for len(add) > 0 {
		n := min(len(add), 500)
		if _, err := git(append([]string{"add", "--"}, add[:n]...)...); err != nil {
			return nil, nil, err
		}
		add = add[n:]
	}
	if patch, err = git("diff", "--cached", "--binary", base); err != nil {
		return nil, nil, err
	}
	if stat, err = git("diff", "--cached", "--stat", base); err != nil {
		return nil, nil, err
	}
	return patch, stat, nil
}

// isStandIn reports an empty file that is a mount point: what the sandbox
// binds over a missing protected file.
func isStandIn(p string, mounts map[string]bool) bool {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		return false
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return mounts[p]
}

// mountPoints reads this process's mount points (field 5 of mountinfo,
// with its octal escapes undone).
func mountPoints() map[string]bool {
	out := map[string]bool{}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			out[mountinfo.Unescape(f[4])] = true
		}
	}
	return out
}

func firstLine(s string, err error) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return err.Error()
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Scan()
	return sc.Text()
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
