package worktree

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// gitRunner runs the git binary with an explicit environment. Nothing of
// kusaw's own environment leaks into git except the few variables listed in
// passEnv: a GIT_DIR or GIT_INDEX_FILE inherited from a hook or a shell would
// make git act on the wrong repository.
type gitRunner struct {
	bin string
	env []string
	// guard switches off filter drivers a step could select (filterGuard).
	guard []string
}

// passEnv are the variables git may see from kusaw's environment, and why:
// PATH finds git's helpers and filter drivers, HOME and XDG_CONFIG_HOME find
// the user's global config (identity, excludes, signing), USER/LOGNAME feed
// git's identity fallback, TMPDIR is where git writes temporary files, and
// GNUPGHOME/SSH_AUTH_SOCK let commit signing work when the user enabled it
// (signing happens here, outside every sandbox).
var passEnv = []string{"PATH", "HOME", "XDG_CONFIG_HOME", "USER", "LOGNAME", "TMPDIR", "GNUPGHOME", "SSH_AUTH_SOCK"}

func newGitRunner() (*gitRunner, error) {
	bin, err := exec.LookPath("git")
	if err != nil {
		return nil, errors.New("git is not installed or not on PATH (install git; kusaw uses it for worktrees and commits)")
	}
	env := []string{
		"GIT_TERMINAL_PROMPT=0", // never wait for a password on a terminal nobody watches
		"GIT_OPTIONAL_LOCKS=0",  // status must not take index.lock in the user's checkout
		"LC_ALL=C",              // stable messages
		"LANGUAGE=C",
	}
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return &gitRunner{bin: bin, env: env}, nil
}

// safeConfig is passed to every git invocation. Hooks and the fsmonitor
// command are programs named by repository config that a step may have
// prepared; kusaw's own git (which runs outside the sandbox) must never start
// them.
var safeConfig = []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}

// gitRuns counts git processes started, for the benchmarks.
var gitRuns atomic.Int64

type gitCmd struct {
	dir   string
	env   []string // added to the runner's environment
	stdin io.Reader
	args  []string
}

// run executes git and returns its stdout. A failure is an error whose text
// names the git subcommand and git's own first line of complaint.
func (g *gitRunner) run(c gitCmd) ([]byte, error) {
	gitRuns.Add(1)
	args := append(append(append([]string{}, safeConfig...), g.guard...), c.args...)
	cmd := exec.Command(g.bin, args...)
	cmd.Dir = c.dir
	cmd.Env = append(append([]string{}, g.env...), c.env...)
	cmd.Stdin = c.stdin
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), &gitError{args: c.args, stderr: errb.String(), err: err}
	}
	return out.Bytes(), nil
}

// gitError keeps git's stderr for the message and the exit status for
// callers that treat some statuses as answers (merge-base --is-ancestor).
type gitError struct {
	args   []string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	sub := "git"
	for i := 0; i < len(e.args); i++ {
		if e.args[i] == "-c" {
			i++ // -c name=value
			continue
		}
		if !strings.HasPrefix(e.args[i], "-") {
			sub = "git " + e.args[i]
			break
		}
	}
	msg := strings.TrimSpace(e.stderr)
	// git prefixes its errors with fatal:/error:; keep the most specific line.
	lines := strings.Split(msg, "\n")
	pick := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "fatal:") || strings.HasPrefix(l, "error:") {
			pick = l
			break
		}
	}
	if pick == "" && len(lines) > 0 {
		pick = strings.TrimSpace(lines[0])
	}
	if pick == "" {
		pick = e.err.Error()
	}
	return fmt.Sprintf("%s: %s", sub, pick)
}

func (e *gitError) exitCode() int {
	var ee *exec.ExitError
	if errors.As(e.err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func exitCodeOf(err error) int {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.exitCode()
	}
	return -1
}

func firstLine(b []byte) string {
	s := string(b)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// configFacts reads, in one git process, what kusaw needs of a
// repository's config (its own, the user's and the system's, and what
// they include): the filter guard (filterGuard); whether an attempt's
// worktree can be made without `git worktree add` (addPlain): not when
// the repository uses a sparse checkout or per-worktree config, which
// git's add copies; and the config files git read, for OpenRepo's cache.
func (g *gitRunner) configFacts(dir string) (guard []string, plainAdd bool, files []string) {
	out, err := g.run(gitCmd{dir: dir, args: []string{"config", "--list", "--show-origin", "--name-only", "-z"}})
	if err != nil {
		// Nothing configured at all: git config exits 1. Anything else
		// (a broken config) is left to git's own add to report.
		return nil, exitCodeOf(err) == 1, nil
	}
	var filters []string
	plainAdd = true
	seen := map[string]bool{}
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		origin, key := fields[i], strings.ToLower(fields[i+1])
		if f, ok := strings.CutPrefix(origin, "file:"); ok {
			if !filepath.IsAbs(f) {
				f = filepath.Join(dir, f)
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
		switch {
		case strings.HasPrefix(key, "filter."):
			filters = append(filters, fields[i+1])
		case key == "core.sparsecheckout" || key == "extensions.worktreeconfig":
			plainAdd = false
		}
	}
	return g.filterGuard(dir, filters), plainAdd, files
}

// filterGuard returns -c options that switch off each filter driver the
// user's git config defines (git lfs install defines lfs globally) and
// that the .gitattributes files of the repository's HEAD never name.
// kusaw's git runs on the host over trees a sandboxed step wrote: checking
// out the next attempt's worktree (smudge) and committing an attempt's
// files (clean). Which files a driver applies to is decided by those
// trees' .gitattributes, so a step could otherwise make the host run a
// driver the user never meant for this repository (for git-lfs, with the
// step's own .lfsconfig: a fetch from a URL the step chose). A driver the
// repository itself uses keeps working.
//
// keys are the filter.* keys configured (configFacts read them).
func (g *gitRunner) filterGuard(dir string, keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	used := map[string]bool{}
	if b, err := g.run(gitCmd{dir: dir, args: []string{"grep", "-h", "-I", "-o", "-E", "filter=[^[:space:]]+", "HEAD", "--", ".gitattributes", ":(glob)**/.gitattributes"}}); err == nil {
		for _, m := range strings.Fields(string(b)) {
			used[strings.TrimPrefix(m, "filter=")] = true
		}
	}
	var guard []string
	seen := map[string]bool{}
	for _, key := range keys {
		i := strings.LastIndexByte(key, '.')
		if !strings.HasPrefix(key, "filter.") || i <= len("filter.") {
			continue
		}
		name := key[len("filter."):i]
		if seen[name] || used[name] || strings.ContainsAny(name, "=\n") {
			continue
		}
		seen[name] = true
		for _, k := range []string{"process=", "smudge=", "clean=", "required=false"} {
			guard = append(guard, "-c", "filter."+name+"."+k)
		}
	}
	return guard
}
