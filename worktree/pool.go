package worktree

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Worktree reuse (docs/factory.md, "Worktree reuse"). A fresh checkout
// costs what the repository weighs (a 20,000-file tree takes as long as
// git worktree add); an attempt should cost what it changes. So the trees
// of ended attempts wait in a pool per repository in the state folder, and
// the next attempt on that repository takes one, cleans it against the
// index kusaw wrote at its last checkout, and checks the new base out over
// it: git rewrites only what differs.
//
// Layout of a pool (no sandbox sees the state folder):
//
//	pool/<repo>-<hash>/idle-<id>/tree    a tree, its .git link stale
//	pool/<repo>-<hash>/idle-<id>/index   the trusted index of its last checkout
//	pool/<repo>-<hash>/idle-<id>/base    the commit that index holds
//	pool/<repo>-<hash>/idle-<id>/layer   only when its last attempt wrote
//	                                     through a write layer and Release
//	                                     reverted exactly that: the tracked
//	                                     paths to check out again (NUL-ended);
//	                                     the take then skips the cleaning walk
//	pool/<repo>-<hash>/held/<id>.index   the trusted index of a tree in use
//
// An idle tree is taken by renaming its folder away, so two attempts never
// get the same one; a tree goes back only by a rename of a folder complete
// with its trusted metadata, written first. An attempt that crashes leaves
// its tree in the attempt folder, out of the pool; recovery removes it
// (RemoveUnregistered: also before makeAdmin registered it).

// PoolIdleMax is how many idle trees a repository's pool keeps: enough
// for the candidates of a step running side by side.
const PoolIdleMax = 4

// heldMaxAge is when the trusted index of a tree in use is taken for what
// a crashed kusaw left.
const heldMaxAge = 7 * 24 * time.Hour

// Pool is the idle worktrees of one repository in a state folder.
type Pool struct {
	dir string
	max int
}

// Pool returns the repository's pool under stateDir (made when first used).
func (r *Repo) Pool(stateDir string) *Pool {
	sum := sha256.Sum256([]byte(r.CommonDir))
	name := filepath.Base(r.Path)
	if !plainName(name) {
		name = "repo"
	}
	return &Pool{dir: filepath.Join(stateDir, "pool", name+"-"+hex.EncodeToString(sum[:6])), max: PoolIdleMax}
}

// Dir is the pool's folder.
func (p *Pool) Dir() string { return p.dir }

// Idle counts the trees waiting in the pool.
func (p *Pool) Idle() int {
	ents, _ := os.ReadDir(p.dir)
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "idle-") {
			n++
		}
	}
	return n
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newHeld is a new path for the trusted index of a tree in use.
func (p *Pool) newHeld() (string, error) {
	dir := filepath.Join(p.dir, "held")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return filepath.Join(dir, newID()+".index"), nil
}

// reusedTree is a tree taken from the pool and cleaned, waiting for its
// administrative folder and the checkout of the attempt's base.
type reusedTree struct {
	index   string   // its trusted index (of base), held
	base    string   // the commit the index holds
	restore []string // tracked paths the cleaning removed
	report  CleanReport
	idx     *trustedIndex // the index, parsed: still the checkout's when checkoutReused rewrote none of it
	same    bool          // checkoutReused left the index as it was (idx is the new checkout's)
	trusted bool          // released by a write layer's survey: no cleaning walk
}

// take moves an idle tree to abs (which must not exist yet) and its
// trusted index to a held path. ok is false when the pool has none (or
// none can be moved: another filesystem).
func (p *Pool) take(abs string) (index, base string, layer []string, ok bool) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return "", "", nil, false
	}
	stage := filepath.Join(filepath.Dir(abs), ".pool-"+filepath.Base(abs))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "idle-") {
			continue
		}
		if err := os.Rename(filepath.Join(p.dir, e.Name()), stage); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // another attempt took it
			}
			return "", "", nil, false
		}
		index, base, layer, err = p.unpack(stage, abs)
		if err != nil {
			_ = forceRemoveAll(abs)
			_ = os.Remove(index)
		}
		_ = forceRemoveAll(stage)
		if err == nil {
			return index, base, layer, true
		}
	}
	return "", "", nil, false
}

// unpack moves a taken slot's tree to abs and its index to a held path.
// layer, when not nil, is the slot's layer list: the tracked paths to
// check out again, its release having reverted everything else.
func (p *Pool) unpack(stage, abs string) (index, base string, layer []string, err error) {
	b, err := readRegular(filepath.Join(stage, "base"), 200)
	if err != nil {
		return "", "", nil, err
	}
	base = strings.TrimSpace(string(b))
	if !isHash(base) {
		return "", "", nil, fmt.Errorf("pool slot %s names no commit", stage)
	}
	if lb, err := readRegular(filepath.Join(stage, "layer"), maxIndexSize); err == nil {
		layer = []string{}
		for _, q := range strings.Split(string(lb), "\x00") {
			if q != "" {
				layer = append(layer, q)
			}
		}
	}
	if index, err = p.newHeld(); err != nil {
		return "", "", nil, err
	}
	if err := os.Rename(filepath.Join(stage, "index"), index); err != nil {
		return "", "", nil, err
	}
	if err := os.Rename(filepath.Join(stage, "tree"), abs); err != nil {
		return index, "", nil, err
	}
	return index, base, layer, nil
}

// prepareReuse takes an idle tree for abs and cleans it: its .git (a
// link, a folder or a file the step put there) goes without being read or
// followed, then everything the trusted index does not prove is kusaw's
// own checkout. nil: the pool had no tree to give; why: the tree it gave
// could not be used (it is gone, abs is free again).
func (r *Repo) prepareReuse(p *Pool, abs string) (rt *reusedTree, why error) {
	index, base, layer, ok := p.take(abs)
	if !ok {
		return nil, nil
	}
	rt = &reusedTree{index: index, base: base}
	err := forceRemoveAll(filepath.Join(abs, ".git"))
	var idx *trustedIndex
	if err == nil && len(layer) == 0 && layer != nil {
		// Released by its layer with nothing to check out again: no
		// walk, and nothing to look up in the index either (git reads
		// it, checksum and all, if the base moves; the commit parses it
		// when it needs it).
		rt.trusted = true
		return rt, nil
	}
	if err == nil {
		idx, err = readTrustedIndex(index, len(base))
	}
	if err == nil && layer != nil && restorable(idx, layer) {
		// Its last attempt wrote only through a write layer, and its
		// release reverted every path of it: the rest is the very
		// checkout the index describes (the step never wrote the tree
		// itself), so no walk; what Release removed comes back.
		rt.restore, rt.idx, rt.trusted = layer, idx, true
	} else if err == nil {
		rt.restore, rt.report, _, err = cleanTree(abs, idx, cleanFull)
		rt.idx = idx
	}
	if err != nil {
		_ = forceRemoveAll(abs)
		_ = os.Remove(index)
		return nil, fmt.Errorf("cleaning the reused tree: %v", err)
	}
	return rt, nil
}

// restorable: each of paths is an entry of idx (a list kusaw wrote; a
// slot that does not match its own index is cleaned by the walk).
func restorable(idx *trustedIndex, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	files, _ := idx.lookup()
	for _, p := range paths {
		if _, ok := files[p]; !ok {
			return false
		}
	}
	return true
}

// indexConfig is given to every git that reads or writes an attempt's
// index against its files. Whether a file changed is decided by all of its
// stat data, ctime included (a step can set a file's mtime, never its
// ctime), whatever the user's config says; no cache a step could fool
// (untracked cache, fsmonitor), no split index whose shared part would
// stay behind in a folder kusaw removes.
var indexConfig = []string{"-c", "core.trustctime=true", "-c", "core.checkStat=default", "-c", "core.ignoreStat=false",
	"-c", "core.untrackedCache=false", "-c", "core.splitIndex=false", "-c", "index.skipHash=false"}

// checkoutReused checks head out over a cleaned tree registered with
// admin: the entries the cleaning removed come back from the trusted
// index, then a two-way read-tree moves from the index's commit to head,
// writing only what differs (every other file was just proved unchanged).
//
// No git status checks the result afterwards: it would read every file
// once more, and prove nothing the cleaning did not (every path it kept
// is the very inode kusaw's checkout wrote, unchanged since by its
// ctime; every other path is gone, and git wrote what replaced it).
func (r *Repo) checkoutReused(admin, abs, head string, rt *reusedTree) error {
	adminIndex := filepath.Join(admin, "index")
	if err := copyIndex(rt.index, adminIndex); err != nil {
		return err
	}
	env := []string{"GIT_DIR=" + admin, "GIT_WORK_TREE=" + abs}
	git := func(stdin string, args ...string) ([]byte, error) {
		c := gitCmd{dir: abs, env: env, args: append(append([]string{}, indexConfig...), args...)}
		if stdin != "" {
			c.stdin = strings.NewReader(stdin)
		}
		return r.git.run(c)
	}
	if len(rt.restore) > 0 {
		if _, err := git(strings.Join(rt.restore, "\x00")+"\x00", "checkout-index", "-u", "-f", "-z", "--stdin"); err != nil {
			return err
		}
	}
	if rt.base != head {
		if _, err := git("", "read-tree", "-m", "-u", rt.base, head); err != nil {
			return err
		}
	}
	if len(rt.restore) == 0 && rt.base == head {
		rt.same = true
		if rt.trusted {
			return nil // unracy stands on the cleaning's proof, which did not run
		}
		return unracy(adminIndex, rt.idx)
	}
	return nil
}

// unracy stamps index (a copy of idx, whose every entry the cleaning just
// proved to be what kusaw's checkout wrote) with the time now, when idx
// has entries git takes for racily clean: git tells those by the second,
// so every file checked out in the second its index was written (7,000
// of a 20,000-file checkout, 10,000 of a 100,000-file one) would be read
// and hashed again by every git status in the tree, at every attempt. The
// cleaning's proof is finer (the ctime to the nanosecond, before the
// index's own), so they are clean for good. An index git wrote anew
// (files restored, another base) is git's: the entries it just checked
// out stay racy, as they should, and the rest git checked itself.
func unracy(index string, idx *trustedIndex) error {
	now := time.Now()
	racy := false
	for i := range idx.entries {
		if s := int64(idx.entries[i].mtimeS); s >= idx.written.Unix() {
			if s >= now.Unix() {
				return nil // stamped in this second: git is right to doubt it
			}
			racy = true
		}
	}
	if !racy {
		return nil
	}
	if err := os.Chtimes(index, now, now); err != nil {
		return err
	}
	fi, err := os.Lstat(index)
	if err != nil {
		return err
	}
	idx.written = fi.ModTime()
	return nil
}

// keepIndex copies the index kusaw's git just wrote at the checkout of w
// to a held path of p; CommitAll starts from it and, when pooled,
// Release hands it to the pool with the tree.
func (w *Worktree) keepIndex(p *Pool, pooled bool) {
	held, err := p.newHeld()
	if err != nil {
		return
	}
	// Not parsed here: the next acquire parses it (and throws the tree
	// away if it is not a plain checkout's), and CommitAll's git reads it
	// as git wrote it.
	if err := copyIndex(filepath.Join(w.GitDir, "index"), held); err != nil {
		return
	}
	w.index, w.parsed = held, nil
	if pooled {
		w.pool = p
	}
}

// DropIndex removes the worktree's trusted index (when its tree is removed
// instead of released).
func (w *Worktree) DropIndex() {
	if w.index != "" {
		_ = os.Remove(w.index)
		w.index, w.parsed = "", nil
	}
}

// trusted is the worktree's trusted index, parsed once for its commit and
// release (kusaw's own file, in a folder no sandbox sees).
func (w *Worktree) trusted() (*trustedIndex, error) {
	if w.index == "" {
		return nil, errors.New("no trusted index")
	}
	if w.parsed == nil {
		idx, err := readTrustedIndex(w.index, len(w.BaseSHA))
		if err != nil {
			return nil, err
		}
		w.parsed = idx
	}
	return w.parsed, nil
}

// Release hands the tree of an ended attempt (committed or failed; no
// process of its step runs any more) to the pool it came from or was
// checked out for, and drops its registration with the repository. The
// slot's metadata is written first and the slot appears in the pool by one
// rename, complete. false: the tree stays where it is (the pool is full,
// or the worktree has no trusted index) for RemoveWorktree.
func (r *Repo) Release(w *Worktree) (bool, error) {
	p := w.pool
	if p == nil || w.index == "" || !isHash(w.BaseSHA) {
		return false, nil
	}
	p.sweep()
	if p.Idle() >= p.max {
		return false, nil
	}
	if err := r.checkAdminDir(w.GitDir); err != nil {
		return false, fmt.Errorf("release worktree: %v", err)
	}
	if st, err := os.Lstat(w.Path); err != nil || !st.IsDir() {
		return false, fmt.Errorf("release worktree: %s is missing or not a directory", w.Path)
	}
	// What the step left does not wait in the state folder (a socket, a
	// FIFO, an ignored file holding a secret): what the commit's survey
	// found (no process of the step ran since) or, without one, what a
	// listing of the folders shows is removed now; the full cleaning
	// (every tracked file's stat data) comes when the tree is taken, and
	// also catches whatever changed it while it was idle.
	err := errors.New("no survey")
	sv := w.survey
	if sv == nil {
		sv = w.layerSurvey // no commit ran
	}
	layer := false
	if sv != nil {
		_, err = applySurvey(w.Path, sv)
		layer = err == nil && sv.layer
		w.survey, w.layerSurvey = nil, nil
	}
	if err != nil {
		var idx *trustedIndex
		if idx, err = w.trusted(); err == nil {
			_, _, _, err = cleanTree(w.Path, idx, cleanQuick)
		}
	}
	if err != nil {
		return false, nil // RemoveWorktree takes it
	}
	id := newID()
	slot := filepath.Join(p.dir, ".new-"+id)
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return false, fmt.Errorf("release worktree: %v", err)
	}
	if err := os.Mkdir(slot, 0o700); err != nil {
		return false, fmt.Errorf("release worktree: %v", err)
	}
	fail := func(err error) (bool, error) {
		_ = os.RemoveAll(slot)
		return false, fmt.Errorf("release worktree: %v", err)
	}
	// Private as all of the state folder (the tree below keeps a
	// checkout's modes: the slot's folder, 0700, keeps others out).
	if err := os.WriteFile(filepath.Join(slot, "base"), []byte(w.BaseSHA+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if layer {
		var b strings.Builder
		for _, q := range sv.restore {
			b.WriteString(q + "\x00")
		}
		if err := os.WriteFile(filepath.Join(slot, "layer"), []byte(b.String()), 0o600); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(w.index, filepath.Join(slot, "index")); err != nil {
		return fail(err)
	}
	w.index = filepath.Join(slot, "index")
	if err := os.Rename(w.Path, filepath.Join(slot, "tree")); err != nil {
		_ = os.Rename(w.index, filepath.Join(p.dir, "held", id+".index"))
		w.index = filepath.Join(p.dir, "held", id+".index")
		return fail(err)
	}
	// The registration goes with the tree (a crash before this leaves
	// one whose folder is gone: git worktree prune drops it).
	unlock := r.lockWorktrees()
	err = forceRemoveAll(w.GitDir) // the step could write it: a folder it left without permissions too
	unlock()
	w.index = ""
	if err := os.Rename(slot, filepath.Join(p.dir, "idle-"+id)); err != nil {
		_ = forceRemoveAll(slot)
		return true, fmt.Errorf("release worktree: %v", err)
	}
	if err != nil {
		return true, fmt.Errorf("release worktree: remove its registration %s: %v", w.GitDir, err)
	}
	return true, nil
}

// sweep removes what a crashed kusaw left in the pool: a slot half
// assembled (older than an hour: a release takes milliseconds) and held
// indexes too old to belong to an attempt still running.
func (p *Pool) sweep() { p.sweepAt(time.Now()) }

func (p *Pool) sweepAt(now time.Time) {
	ents, _ := os.ReadDir(p.dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), ".new-") && now.Sub(fi.ModTime()) > time.Hour {
			_ = forceRemoveAll(filepath.Join(p.dir, e.Name()))
		}
	}
	// A held index is judged by its ctime, when kusaw last copied or
	// moved it: its mtime is its checkout's, kept on purpose (copyIndex),
	// and a tree reused on an unchanged base keeps it for weeks.
	held, _ := os.ReadDir(filepath.Join(p.dir, "held"))
	for _, e := range held {
		var st unix.Stat_t
		f := filepath.Join(p.dir, "held", e.Name())
		if err := unix.Lstat(f, &st); err == nil {
			if ctime, _ := statTimes(&st); now.Sub(ctime) > heldMaxAge {
				_ = os.Remove(f)
			}
		}
	}
}
