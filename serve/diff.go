package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RunDiff is GET /v1/runs/{id}/diff?repo=NAME: a repo's run branch
// against the commit the run started from, file by file.
type RunDiff struct {
	Repo   string     `json:"repo"`
	Branch string     `json:"branch"`
	Base   string     `json:"base"`
	Head   string     `json:"head,omitempty"` // "" while the run branch does not exist yet
	Files  []DiffFile `json:"files"`
	Added  int        `json:"added"`
	Del    int        `json:"deleted"`
	// Truncated: files past MaxDiffFiles were left out, or patches past
	// MaxDiffBytes were cut (the file is listed, its patch is not).
	Truncated bool `json:"truncated,omitempty"`
}

// DiffFile is one changed file.
type DiffFile struct {
	Path    string `json:"path"`
	OldPath string `json:"old_path,omitempty"` // a rename or copy's source
	Status  string `json:"status"`             // added, modified, deleted, renamed, copied, type_changed
	Added   int    `json:"added"`
	Deleted int    `json:"deleted"`
	Binary  bool   `json:"binary,omitempty"`
	Patch   string `json:"patch,omitempty"`
	// PatchCut: the patch was cut at MaxFilePatchBytes, or left out once
	// the diff reached MaxDiffBytes.
	PatchCut bool `json:"patch_cut,omitempty"`
}

// Bounds of one diff answer: a run that rewrote a vendored tree must not
// make serve hold or send hundreds of megabytes. (Variables so a test can
// lower them.)
var (
	MaxDiffFiles      = 2000
	MaxDiffBytes      = 4 << 20
	MaxFilePatchBytes = 512 << 10
)

const diffTimeout = 30 * time.Second

var hexSHA = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`) })

// errNoGit is returned when git is not on PATH.
var errNoGit = errors.New("git is not installed or not on PATH (install git; the diff view runs it)")

// diffGit runs git in a repository outside every sandbox. The repository's
// hooks, fsmonitor, external diff drivers and textconv filters are
// programs a step could have named: none of them runs.
func diffGit(ctx context.Context, dir string, stdout io.Writer, args ...string) error {
	bin, err := exec.LookPath("git")
	if err != nil {
		return errNoGit
	}
	full := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "diff.external=",
		"-c", "core.quotePath=false", "--no-pager"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = dir
	cmd.Env = []string{"GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1"}
	for _, k := range []string{"PATH", "HOME", "XDG_CONFIG_HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &limitedBuffer{b: &errb, n: 4096}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return fmt.Errorf("git %s in %s: %v %s", args[0], dir, err, msg)
	}
	return nil
}

// limitedBuffer keeps the first n bytes written and discards the rest
// (without failing the writer, so git is not killed by a full pipe).
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// resolveHead is the commit of refs/heads/<branch>, "" when it does not
// exist.
func resolveHead(ctx context.Context, dir, branch string) (string, error) {
	if branch == "" || strings.HasPrefix(branch, "-") || strings.ContainsAny(branch, " \t\n\x00") {
		return "", fmt.Errorf("run branch %q is not a branch name", branch)
	}
	var out bytes.Buffer
	if err := diffGit(ctx, dir, &out, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}"); err != nil {
		if errors.Is(err, errNoGit) {
			return "", err
		}
		return "", nil
	}
	return strings.TrimSpace(out.String()), nil
}

// computeDiff compares base with head in the repository at dir.
func computeDiff(ctx context.Context, dir, base, head string) ([]DiffFile, bool, error) {
	if !hexSHA().MatchString(base) || !hexSHA().MatchString(head) {
		return nil, false, fmt.Errorf("base %q or head %q is not a commit id", base, head)
	}
	ctx, cancel := context.WithTimeout(ctx, diffTimeout)
	defer cancel()
	// One git: first the file list (names exactly, NUL-separated; status;
	// counts), then the patch in the same order, read until MaxDiffBytes.
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := diffGit(ctx, dir, pw, "diff", "--raw", "--numstat", "-p", "-z", "--no-color", "--no-ext-diff", "--no-textconv", "-M", base, head, "--")
		pw.CloseWithError(err)
		errc <- err
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	files := readFileList(br)
	truncated := false
	if len(files) > MaxDiffFiles {
		files, truncated = files[:MaxDiffFiles], true
	}
	total, i := 0, -1
	var cur bytes.Buffer
	flush := func() {
		if i < 0 || i >= len(files) {
			return
		}
		f := &files[i]
		p := cur.Bytes()
		if len(p) > MaxFilePatchBytes {
			p, f.PatchCut = p[:MaxFilePatchBytes], true
		}
		total += len(p)
		f.Patch = string(p)
	}
	stopped, lineStart := false, true
	for {
		line, err := br.ReadSlice('\n')
		if lineStart && bytes.HasPrefix(line, []byte("diff --git ")) {
			flush()
			cur.Reset()
			i++
			if total >= MaxDiffBytes || i >= len(files) {
				// Enough: closing the pipe ends git.
				stopped = true
				break
			}
		} else if i >= 0 && cur.Len() <= MaxFilePatchBytes {
			cur.Write(line)
		}
		lineStart = err != bufio.ErrBufferFull
		if err != nil && err != bufio.ErrBufferFull {
			break
		}
	}
	pr.Close()
	gitErr := <-errc
	if stopped {
		for j := i; j < len(files); j++ {
			files[j].PatchCut, truncated = true, true
		}
	} else {
		if gitErr != nil {
			return nil, false, gitErr
		}
		flush()
	}
	return files, truncated, nil
}

// readFileList reads the list part of `git diff --raw --numstat -p -z`:
// one raw record per file (":mode mode sha sha STATUS\0path\0[path\0]"),
// then one numstat record per file ("added\tdeleted\tpath\0" or, for a
// rename, "added\tdeleted\t\0old\0new\0"), then an empty record before
// the patch.
func readFileList(br *bufio.Reader) []DiffFile {
	next := func() (string, bool) {
		s, err := br.ReadString(0)
		if err != nil {
			return "", false
		}
		return s[:len(s)-1], true
	}
	var files []DiffFile
	tok, ok := next()
	for ok && strings.HasPrefix(tok, ":") {
		fields := strings.Fields(tok)
		st := ""
		if len(fields) >= 5 {
			st = fields[4]
		}
		f := DiffFile{Status: statusName(st)}
		if strings.HasPrefix(st, "R") || strings.HasPrefix(st, "C") {
			f.OldPath, _ = next()
		}
		if f.Path, ok = next(); !ok {
			return files
		}
		files = append(files, f)
		tok, ok = next()
	}
	for n := 0; ok && n < len(files); n++ {
		if n > 0 {
			if tok, ok = next(); !ok {
				break
			}
		}
		parts := strings.SplitN(tok, "\t", 3)
		if len(parts) != 3 {
			break
		}
		f := &files[n]
		if parts[0] == "-" && parts[1] == "-" {
			f.Binary = true
		} else {
			f.Added, _ = strconv.Atoi(parts[0])
			f.Deleted, _ = strconv.Atoi(parts[1])
		}
		if parts[2] == "" { // a rename: its two names follow
			next()
			next()
		}
	}
	if len(files) > 0 {
		next() // the empty record before the patch
	}
	return files
}

// parseRawNumstat reads a whole list (tests).
func parseRawNumstat(b []byte) []DiffFile {
	return readFileList(bufio.NewReader(bytes.NewReader(b)))
}

func statusName(s string) string {
	switch {
	case s == "":
		return "modified"
	case s[0] == 'A':
		return "added"
	case s[0] == 'D':
		return "deleted"
	case s[0] == 'R':
		return "renamed"
	case s[0] == 'C':
		return "copied"
	case s[0] == 'T':
		return "type_changed"
	}
	return "modified"
}
