package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The stand-ins (empty read-only files bound over protected files that do
// not exist yet, such as .mcp.json) are files in the worktree as far as
// git can tell: the step's git status listed them and its git add -A
// committed them (issue 24, finding 6). So the step's git is shown a
// private info/exclude of each repository that lists them: the
// repository's own exclude (which the step still sees) and, anchored at
// each worktree's top, every stand-in file there. It is bound read-only
// over <git folder>/info/exclude, inside the git folder that is read-only
// anyway, so the step cannot take the lines out; the repository's own
// file, which your checkout and kusaw's git outside read, is not changed.
// Stand-in folders need nothing: git does not see an empty folder.

// maxExclude bounds the repository's own info/exclude that is copied.
const maxExclude = 1 << 20

// gitTop is a writable work tree and the git folder that holds its
// info/exclude (a linked worktree's common folder, a checkout's .git).
type gitTop struct{ top, gitDir string }

// gitExcludes adds, for each git folder whose work trees got
// stand-in files, the private exclude file and its bind.
func (b *builder) gitExcludes() error {
	if b.plan.Backend != "bubblewrap" {
		return nil // Seatbelt makes no stand-ins
	}
	var tops []gitTop
	for _, w := range b.in.Worktrees {
		if w.Writable && w.Path != "" && w.CommonDir != "" {
			tops = append(tops, gitTop{resolve(w.Path), resolve(w.CommonDir)})
		}
	}
	for _, c := range b.in.Checkouts {
		top := resolve(c)
		if fi, err := os.Lstat(filepath.Join(top, ".git")); err == nil && fi.IsDir() {
			tops = append(tops, gitTop{top, filepath.Join(top, ".git")})
		}
	}
	lines := map[string][]string{} // git folder -> exclude lines
	var order []string
	for _, t := range tops {
		for _, m := range b.protect {
			if m.Op != "empty-file" || !within(t.top, m.Dst) || m.Dst == t.top {
				continue
			}
			rel, err := filepath.Rel(t.top, m.Dst)
			if err != nil || strings.ContainsAny(rel, "\n\r") {
				continue // no exclude line can name it
			}
			if _, ok := lines[t.gitDir]; !ok {
				order = append(order, t.gitDir)
			}
			if l := excludeLine(filepath.ToSlash(rel)); !slices.Contains(lines[t.gitDir], l) {
				lines[t.gitDir] = append(lines[t.gitDir], l)
			}
		}
	}
	for _, gd := range order {
		dst := filepath.Join(gd, "info", "exclude")
		own, err := readOwnExclude(dst)
		if err != nil {
			// Not a file kusaw would copy or mount over: the stand-ins
			// stay visible to git, and the plan says so.
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("%s: %v; the step's git status lists the sandbox's stand-ins", dst, err))
			continue
		}
		var sb strings.Builder
		sb.WriteString(own)
		if own != "" && !strings.HasSuffix(own, "\n") {
			sb.WriteByte('\n')
		}
		sb.WriteString("# kusaw: the sandbox's stand-ins (empty read-only files over protected paths that do not exist; gone after the step)\n")
		for _, l := range lines[gd] {
			sb.WriteString(l + "\n")
		}
		content := sb.String()
		sum := sha256.Sum256([]byte(gd + "\x00" + content))
		src := filepath.Join(b.attempt, ".sandbox-exclude-"+hex.EncodeToString(sum[:6]))
		b.plan.GitExcludes = append(b.plan.GitExcludes, GitExclude{Path: src, Content: content, MountOn: dst})
		b.addBind(&b.protect, "ro-bind", src, dst, "the repository's info/exclude as the step's git reads it: its own lines and the sandbox's stand-ins, so git status and git add -A never see them")
	}
	return nil
}

// readOwnExclude reads a repository's info/exclude: "" when it does not
// exist, an error when it is not a regular file of a sensible size (a
// link is never followed).
func readOwnExclude(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cannot read it (%v)", unwrapPath(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file")
	}
	if fi.Size() > maxExclude {
		return "", fmt.Errorf("larger than %d bytes", maxExclude)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxExclude))
	return string(b), err
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// excludeLine is a gitignore pattern matching exactly rel (slash-separated,
// from the top of the work tree): anchored, with git's wildcards and
// leading specials escaped.
func excludeLine(rel string) string {
	var sb strings.Builder
	sb.WriteByte('/')
	for i := 0; i < len(rel); i++ {
		c := rel[i]
		switch c {
		case '*', '?', '[', '\\':
			sb.WriteByte('\\')
		case ' ':
			if i == len(rel)-1 {
				sb.WriteByte('\\')
			}
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// GitExclude is a private info/exclude Prepare writes at Path (in the
// attempt folder) for the bind over MountOn.
type GitExclude struct {
	Path    string `json:"path"`
	MountOn string `json:"mount_on"`
	// Content stays out of the plan's record (the sandbox.plan event):
	// the repository's own exclude can be long.
	Content string `json:"-"`
}

// writeGitExcludes writes the plan's private exclude files (once: the
// name holds their content's hash) and makes sure each mount point
// exists: git init makes info/exclude, and a repository without one gets
// an empty one (and its info/ folder), left there.
func (p *Plan) writeGitExcludes() error {
	for _, g := range p.GitExcludes {
		if _, err := os.Lstat(g.MountOn); os.IsNotExist(err) {
			if err := os.MkdirAll(filepath.Dir(g.MountOn), 0o755); err != nil {
				return fmt.Errorf("sandbox: creating %s: %w", filepath.Dir(g.MountOn), err)
			}
			if f, err := os.OpenFile(g.MountOn, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
				f.Close()
			} else if !os.IsExist(err) {
				return fmt.Errorf("sandbox: creating %s: %w", g.MountOn, err)
			}
		}
		if _, err := os.Lstat(g.Path); err == nil {
			continue
		}
		// kusaw sandbox exec without a factory makes its folder later.
		if err := os.MkdirAll(filepath.Dir(g.Path), 0o700); err != nil {
			return fmt.Errorf("sandbox: creating %s: %w", filepath.Dir(g.Path), err)
		}
		if err := os.WriteFile(g.Path, []byte(g.Content), 0o444); err != nil {
			return fmt.Errorf("sandbox: writing %s: %w", g.Path, err)
		}
	}
	return nil
}
