package attempt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/worktree"
)

// Worktree set-up (docs/factory.md, "Worktree set-up"): what an attempt gets
// beside its fresh worktrees, outside the sandbox, before its process
// starts: gitignored files copied from the main checkout (repos.NAME.
// include), named caches shared across attempts, and leased host ports.

// pool is the repository's pool of worktrees in the state folder
// (docs/factory.md, "Worktree reuse"): the attempt's tree comes from it
// when an earlier attempt left one, and goes back to it at the end. None
// without a state folder.
func (a *Attempt) pool(repo *worktree.Repo) *worktree.Pool {
	if a.h.StateDir == "" {
		return nil
	}
	return repo.Pool(a.h.StateDir)
}

// worktreeCreated is the worktree.created event's data: whether the tree
// was reused, and what its cleaning removed or repaired.
func worktreeCreated(w *record.WorktreeRecord, wt *worktree.Worktree) map[string]any {
	d := map[string]any{"repo": w.Repo, "path": w.Path, "branch": w.Branch, "base": w.BaseSHA}
	if len(wt.Sparse) > 0 {
		d["sparse"] = wt.Sparse
	}
	if wt.Reused {
		d["reused"] = true
		d["cleaned"] = map[string]any{"untracked": wt.Cleaned.Untracked, "replaced": wt.Cleaned.Replaced, "changed": wt.Cleaned.Changed, "folders": wt.Cleaned.Folders}
	}
	if wt.Trusted {
		d["walk_skipped"] = true // released by its write layer's survey
	}
	if wt.ReuseFailed != "" {
		d["reuse_failed"] = wt.ReuseFailed
	}
	return d
}

// releaseWorktree hands an ended attempt's tree to its repository's pool
// (no process of the step runs any more: Finish comes after them). false:
// the tree is still there for RemoveWorktree.
func (a *Attempt) releaseWorktree(repo *worktree.Repo, w *record.WorktreeRecord) bool {
	wt := a.wts[w.Repo]
	if wt == nil {
		return false
	}
	if a.writeFailure() {
		// A state folder that could not be written is likely full:
		// removing the tree frees the room the final records need.
		wt.DropIndex()
		return false
	}
	ok, err := repo.Release(wt)
	if err != nil {
		a.events.Emit(record.EvWorktreeRemoveFailed, map[string]any{"repo": w.Repo, "error": err.Error()})
	}
	if !ok {
		wt.DropIndex()
		return false
	}
	w.Removed = true
	return true
}

// attemptExtras is what set-up gave one attempt, to undo after it.
type attemptExtras struct {
	included map[string][]string // worktree path → copied files (relative)
	ports    []int
	release  []func()
}

// includeFiles copies each active repo's include globs from its main
// checkout into the new worktree. The files are removed again before the
// commit, so a step that un-ignores them cannot commit them.
func (a *Attempt) includeFiles() error {
	home, _ := os.UserHomeDir()
	for _, w := range a.rec.Worktrees {
		include := a.h.Include[w.Repo]
		if len(include) == 0 {
			continue
		}
		copied, err := worktree.CopyIgnored(a.h.Repos[w.Repo], w.Path, include, home)
		if wt := a.wts[w.Repo]; wt != nil {
			wt.NoteWritten(copied...) // a write layer's release removes them
		}
		if len(copied) > 0 {
			if a.extras.included == nil {
				a.extras.included = map[string][]string{}
			}
			a.extras.included[w.Path] = copied
		}
		a.events.Emit(record.EvIncluded, map[string]any{"repo": w.Repo, "files": copied})
		if err != nil {
			return fmt.Errorf("repos.%s.include: %v", w.Repo, err)
		}
	}
	return nil
}

// dropIncluded removes the included files before the worktree is committed
// (never through a link the step put in the worktree).
func (a *Attempt) dropIncluded() {
	for dir, files := range a.extras.included {
		worktree.RemoveCopied(dir, files)
	}
}

// holdResources takes what the attempt's processes share with others: a
// lock on each cache (one writer at a time; it waits for the holder) and
// the leased ports. releaseResources gives them back.
func (a *Attempt) holdResources(ctx context.Context) error {
	release := a.releaseResources
	for _, c := range a.f.StepCaches(a.step) {
		for _, p := range c.Vars() {
			if err := os.MkdirAll(p, 0o700); err != nil {
				release()
				return fmt.Errorf("cache %s: %v", c.Name, err)
			}
		}
		unlock, err := lockWait(ctx, c.Path+".lock", func() {
			a.events.Emit(record.EvCacheWaiting, map[string]any{"cache": c.Name})
		})
		if err != nil {
			release()
			return fmt.Errorf("cache %s: %v", c.Name, err)
		}
		a.extras.release = append(a.extras.release, unlock)
	}
	if n := a.step.Ports; n > 0 {
		ports, free, err := leasePorts(a.h.StateDir, n)
		if err != nil {
			release()
			return err
		}
		a.extras.ports = ports
		a.extras.release = append(a.extras.release, free)
		a.events.Emit(record.EvPortsLeased, map[string]any{"ports": ports})
	}
	return nil
}

// releaseResources gives back what holdResources took.
func (a *Attempt) releaseResources() {
	for i := len(a.extras.release) - 1; i >= 0; i-- {
		a.extras.release[i]()
	}
	a.extras.release = nil
}

// resourceEnv adds the caches' variables and KUSAW_PORT_n to a process's
// environment (none of them is a secret).
func (a *Attempt) resourceEnv(env map[string]string) {
	for _, c := range a.f.StepCaches(a.step) {
		for k, v := range c.Vars() {
			env[k] = v
		}
	}
	for i, p := range a.extras.ports {
		env["KUSAW_PORT_"+strconv.Itoa(i+1)] = strconv.Itoa(p)
	}
}

// cachePaths are the folders the sandbox makes writable for the caches.
func (a *Attempt) cachePaths() []string {
	var out []string
	for _, c := range a.f.StepCaches(a.step) {
		out = append(out, c.Path)
	}
	return out
}

// lockWait takes an exclusive flock on path, waiting (and saying so once)
// while another attempt holds it.
func lockWait(ctx context.Context, path string, waiting func()) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		if !said {
			waiting()
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// portLeases are the ports leased by this process; a flock per port in the
// state folder keeps other kusaw processes of the factory off them.
var portLeases = struct {
	sync.Mutex
	held map[int]bool
}{held: map[int]bool{}}

// leasePorts finds n free loopback TCP ports no running attempt holds.
func leasePorts(stateDir string, n int) ([]int, func(), error) {
	dir := filepath.Join(stateDir, "ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	var ports []int
	var locks []*os.File
	free := func() {
		portLeases.Lock()
		for _, p := range ports {
			delete(portLeases.held, p)
		}
		portLeases.Unlock()
		for _, l := range locks {
			os.Remove(l.Name())
			l.Close()
		}
	}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 50*n {
			free()
			return nil, nil, fmt.Errorf("could not lease %d free ports", n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			free()
			return nil, nil, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		portLeases.Lock()
		taken := portLeases.held[p]
		if !taken {
			portLeases.held[p] = true
		}
		portLeases.Unlock()
		if taken {
			continue
		}
		lf, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE, 0o600)
		if err == nil && syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			ports = append(ports, p)
			locks = append(locks, lf)
			continue
		}
		if lf != nil {
			lf.Close()
		}
		portLeases.Lock()
		delete(portLeases.held, p)
		portLeases.Unlock()
	}
	return ports, free, nil
}

// checkLayer is sandbox.CheckLayer; the tests give the machine's answer
// (it mounts only with a stage program, which their binary lacks).
var checkLayer = sandbox.CheckLayer

// writeLayer makes repo's write layer for the sandbox of process i
// (docs/factory.md, "The write layer") when repos.NAME.write_layer is
// overlay and every write to the tree before the commit goes through it:
// one process writes the tree, setup did not run on the host in it, and
// the machine can mount one. "" otherwise, the event saying why.
func (a *Attempt) writeLayer(repo string) string {
	rc := a.f.Repos[repo]
	wt := a.wts[repo]
	if rc == nil || rc.WriteLayer != config.WriteLayerOverlay || wt == nil {
		return ""
	}
	writers := 0
	for _, p := range a.spec.Processes {
		if slices.Contains(p.Repos, repo) {
			writers++
		}
	}
	why := ""
	switch {
	case wt.Layer() != "":
		return wt.Layer()
	case a.h.StateDir == "":
		why = "no state folder: kusaw keeps no index of the checkout to compare the layer with"
	case writers != 1:
		why = fmt.Sprintf("%d processes of the attempt write the worktree; a layer serves one", writers)
	case len(a.f.Setup) > 0 && !a.setupInside[repo]:
		why = "setup ran on the host in the worktree, which the layer's survey would not see"
	}
	if why == "" {
		if err := checkLayer(a.h.StateDir); err != nil {
			why = err.Error()
		}
	}
	dir := ""
	if why == "" {
		var err error
		if dir, err = wt.NewLayer(); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		a.events.Emit(record.EvWriteLayer, map[string]any{"repo": repo, "used": false, "why": why})
		return ""
	}
	a.events.Emit(record.EvWriteLayer, map[string]any{"repo": repo, "used": true})
	return dir
}

// applyLayers moves each write layer into its tree once the processes
// have ended (before the verdict, the commit and anything reading the
// tree); a layer whose apply fails keeps that tree from being committed.
func (a *Attempt) applyLayers() {
	for _, w := range a.rec.Worktrees {
		wt := a.wts[w.Repo]
		if wt == nil || wt.Layer() == "" {
			continue
		}
		start := time.Now()
		err := wt.ApplyLayer(wt.Layer())
		for _, f := range wt.LayerDropped {
			a.events.Emit(record.EvLeftBehind, map[string]any{"repo": w.Repo, "path": f.Path, "kind": f.Kind, "action": f.Action})
		}
		d := map[string]any{"repo": w.Repo, "changed": wt.LayerChanged(), "duration_us": time.Since(start).Microseconds()}
		if err != nil {
			d["error"] = err.Error()
			a.mu.Lock()
			if a.layerFailed == nil {
				a.layerFailed = map[string]string{}
			}
			a.layerFailed[w.Repo] = fmt.Sprintf("repo %s: the step's write layer could not be applied, so its tree is not committed: %v", w.Repo, err)
			a.mu.Unlock()
		}
		a.events.Emit(record.EvLayerApplied, d)
	}
}
