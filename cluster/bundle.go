package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Bundles carry code between serve and a worker (docs/cluster.md): the
// git bundle format (v2), made from a commit without touching the source
// repo's refs, and read by `git index-pack --strict`, which re-hashes
// every object and checks its links, at the receiving end, serve's or a
// worker's: the end that trusts nothing the other sends. The sender does
// not check its own pack first: a broken one is refused there all the same.

const bundleHeader = "# v2 git bundle\n"

// bundleRef is the one ref a kusaw bundle names.
const bundleRef = "refs/kusaw/bundle"

// Compiled on first use: only cluster work needs it, not every start.
var shaRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`) })

func git(ctx context.Context, dir string, stdin io.Reader, stdout io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	var out bytes.Buffer
	err := git(ctx, dir, nil, &out, args...)
	return strings.TrimSpace(out.String()), err
}

// HasCommit reports whether repo holds commit sha.
func HasCommit(ctx context.Context, repo, sha string) bool {
	return shaRe().MatchString(sha) && git(ctx, repo, nil, io.Discard, "cat-file", "-e", sha+"^{commit}") == nil
}

// MakeBundle writes to out a bundle of tip without what the commits in
// have (those the receiver holds, and repo too) already reach. It returns
// the bundle's size. The receiver checks the pack (ImportBundle).
func MakeBundle(ctx context.Context, repo, out, tip string, have []string) (int64, error) {
	if !shaRe().MatchString(tip) {
		return 0, fmt.Errorf("bundle: %s is not a commit of %s", tip, repo)
	}
	// The bundle's prerequisites are the boundary commits git finds, in
	// one pass. Most often every commit named is in repo (a worker's
	// bundle against its base), and that pass is the only question
	// asked: a git process costs a few milliseconds, and every attempt
	// makes a bundle. It fails on a commit repo does not know, and
	// prints no tip that is not a commit or that have already reaches:
	// then the commits repo knows are sorted out first, as one more
	// process.
	prereqs, ok := boundary(ctx, repo, tip, have)
	if !ok {
		known := knownCommits(ctx, repo, append([]string{tip}, have...))
		if !slices.Contains(known, tip) {
			return 0, fmt.Errorf("bundle: %s is not a commit of %s", tip, repo)
		}
		var kept []string
		for _, h := range known {
			if h != tip {
				kept = append(kept, h)
			}
		}
		have = kept
		var err error
		if prereqs, err = boundaryOf(ctx, repo, tip, have); err != nil {
			return 0, err
		}
	}
	revs := revsOf(tip, have)
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	w.WriteString(bundleHeader)
	for _, p := range prereqs {
		w.WriteString("-" + p + "\n")
	}
	w.WriteString(tip + " " + bundleRef + "\n\n")
	if err := w.Flush(); err != nil {
		return 0, err
	}
	// The pack goes straight after the header, from pack-objects.
	if err := git(ctx, repo, strings.NewReader(revs), f, "pack-objects", "--revs", "--stdout", "-q"); err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// revsOf is the input of rev-list and pack-objects for tip without have.
func revsOf(tip string, have []string) string {
	revs := tip + "\n"
	for _, h := range have {
		if h != tip && shaRe().MatchString(h) {
			revs += "^" + h + "\n"
		}
	}
	return revs
}

// boundary asks rev-list for tip without have and returns the boundary
// commits, and whether the answer can be used as it is: tip is a commit
// that have does not reach, and every commit named is known.
func boundary(ctx context.Context, repo, tip string, have []string) ([]string, bool) {
	for _, h := range have {
		if h == tip || !shaRe().MatchString(h) {
			return nil, false
		}
	}
	var out bytes.Buffer
	if git(ctx, repo, strings.NewReader(revsOf(tip, have)), &out, "rev-list", "--boundary", "--stdin") != nil {
		return nil, false
	}
	prereqs, lines := parseBoundary(out.String())
	return prereqs, slices.Contains(lines, tip)
}

func boundaryOf(ctx context.Context, repo, tip string, have []string) ([]string, error) {
	var out bytes.Buffer
	if err := git(ctx, repo, strings.NewReader(revsOf(tip, have)), &out, "rev-list", "--boundary", "--stdin"); err != nil {
		return nil, err
	}
	prereqs, _ := parseBoundary(out.String())
	return prereqs, nil
}

// parseBoundary splits rev-list --boundary's output into the boundary
// commits (prefixed "-") and the commits listed.
func parseBoundary(out string) (prereqs, commits []string) {
	for _, l := range strings.Split(out, "\n") {
		if b, ok := strings.CutPrefix(l, "-"); ok && shaRe().MatchString(b) {
			prereqs = append(prereqs, b)
		} else if shaRe().MatchString(l) {
			commits = append(commits, l)
		}
	}
	return prereqs, commits
}

// ImportBundle checks a bundle and stores its objects in repo: its
// prerequisites must be there already, and index-pack --strict re-hashes
// every object it brings. It returns the commit the bundle carries; no ref
// of repo changes.
func ImportBundle(ctx context.Context, repo, file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	line, err := r.ReadString('\n')
	if err != nil || line != bundleHeader {
		return "", fmt.Errorf("bundle: not a v2 git bundle")
	}
	tip := ""
	var prereqs []string
	for {
		line, err = r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("bundle: truncated header")
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			break
		}
		if p, ok := strings.CutPrefix(line, "-"); ok {
			// Asked only if the check fails (index-pack refuses a pack
			// whose links are not all in repo): to name the one missing.
			p, _, _ = strings.Cut(p, " ")
			prereqs = append(prereqs, p)
			continue
		}
		sha, ref, ok := strings.Cut(line, " ")
		if !ok || ref != bundleRef || !shaRe().MatchString(sha) || tip != "" {
			return "", fmt.Errorf("bundle: unexpected header line %q", line)
		}
		tip = sha
	}
	if tip == "" {
		return "", fmt.Errorf("bundle: names no commit")
	}
	// The receiving end's check: index-pack --strict re-hashes every
	// object and checks its links, on a copy of the pack outside the repo.
	// Only then do the objects go in, loose: a new pack file appearing
	// while another reader (go-git, opened afresh for every question) lists
	// the pack folder can fail its lookup, and attempts import at once.
	tmp, err := os.MkdirTemp("", "kusaw-import-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	packPath := filepath.Join(tmp, "in.pack")
	pf, err := os.Create(packPath)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(pf, r)
	if cerr := pf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if err := git(ctx, repo, nil, io.Discard, "index-pack", "--strict", "-o", filepath.Join(tmp, "in.idx"), packPath); err != nil {
		known := knownCommits(ctx, repo, prereqs)
		for _, p := range prereqs {
			if !slices.Contains(known, p) {
				return "", fmt.Errorf("bundle: needs commit %s, which this repo does not have", p)
			}
		}
		return "", fmt.Errorf("bundle refused: %v", err)
	}
	in, err := os.Open(packPath)
	if err != nil {
		return "", err
	}
	defer in.Close()
	if err := git(ctx, repo, in, io.Discard, "unpack-objects", "-q", "--strict"); err != nil {
		return "", fmt.Errorf("bundle refused: %v", err)
	}
	// The tip is a commit of the pack index-pack just checked (read from
	// its index, without a git process), or else one repo already had.
	if !packHasCommit(filepath.Join(tmp, "in.idx"), packPath, tip) && !HasCommit(ctx, repo, tip) {
		return "", fmt.Errorf("bundle: its commit %s is not in its pack", tip)
	}
	return tip, nil
}

// packHasCommit reports whether the pack at packPath, with its version 2
// index at idxPath (as index-pack writes it for SHA-1), stores sha whole
// as a commit. False when it cannot tell (a deltified entry, another
// index version or hash): the caller asks git then.
func packHasCommit(idxPath, packPath, sha string) bool {
	want, err := hex.DecodeString(sha)
	if err != nil || len(want) != 20 {
		return false
	}
	idx, err := os.ReadFile(idxPath)
	if err != nil || len(idx) < 8+256*4 || string(idx[:8]) != "\xfftOc\x00\x00\x00\x02" {
		return false
	}
	fan := func(i int) int { return int(binary.BigEndian.Uint32(idx[8+i*4:])) }
	n := fan(255)
	names, offs := 8+256*4, 8+256*4+n*20+n*4
	if len(idx) < offs+n*4 {
		return false
	}
	lo := 0
	if want[0] > 0 {
		lo = fan(int(want[0]) - 1)
	}
	hi := fan(int(want[0]))
	if lo > hi || hi > n {
		return false
	}
	i := lo + sort.Search(hi-lo, func(k int) bool { return bytes.Compare(idx[names+(lo+k)*20:names+(lo+k)*20+20], want) >= 0 })
	if i >= hi || !bytes.Equal(idx[names+i*20:names+i*20+20], want) {
		return false
	}
	off := binary.BigEndian.Uint32(idx[offs+i*4:])
	if off&0x80000000 != 0 {
		return false // a pack over 2 GiB: its large offsets are not read here
	}
	f, err := os.Open(packPath)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(off)); err != nil {
		return false
	}
	// An entry's first byte: bits 4–6 are its type, 1 a commit.
	return (b[0]>>4)&7 == 1
}

// knownCommits keeps the commits of shas that repo holds, with one git
// process.
func knownCommits(ctx context.Context, repo string, shas []string) []string {
	var in strings.Builder
	var asked []string
	for _, h := range shas {
		if shaRe().MatchString(h) {
			in.WriteString(h + "\n")
			asked = append(asked, h)
		}
	}
	if len(asked) == 0 {
		return nil
	}
	var out bytes.Buffer
	if git(ctx, repo, strings.NewReader(in.String()), &out, "cat-file", "--batch-check=%(objectname) %(objecttype)") != nil {
		return nil
	}
	var known []string
	for _, l := range strings.Split(out.String(), "\n") {
		if sha, typ, ok := strings.Cut(l, " "); ok && typ == "commit" {
			known = append(known, sha)
		}
	}
	return known
}
