package factory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/worktree"
)

// Retention bounds how many finished runs the state folder keeps and for
// how long (kusaw gc, retention: in the factory file). Zero is no bound.
type Retention = config.Retention

// Sandbox exec's and doctor's runs are kept for less: they are looked at
// right after they ran, if at all. Retention applies the smaller of these
// and its own bounds to them, apart from the pipelines' runs.
const (
	SandboxMaxAge  = 24 * time.Hour
	SandboxMaxRuns = 10
)

// forSandbox is the bound for sandbox exec's and doctor's runs.
func forSandbox(p Retention) Retention {
	if p == (Retention{}) {
		return p // no bound asked for: nothing goes
	}
	s := Retention{MaxAge: SandboxMaxAge, MaxRuns: SandboxMaxRuns}
	if p.MaxAge > 0 && p.MaxAge < s.MaxAge {
		s.MaxAge = p.MaxAge
	}
	if p.MaxRuns > 0 && p.MaxRuns < s.MaxRuns {
		s.MaxRuns = p.MaxRuns
	}
	return s
}

// GCRun is one run retention removed (or would remove), or kept although a
// bound reached it, and why.
type GCRun struct {
	Run      string    `json:"run"`
	Pipeline string    `json:"pipeline"`
	State    string    `json:"state"`
	Ended    time.Time `json:"ended"`
	Why      string    `json:"why"`
	Branches []string  `json:"branches,omitempty"` // deleted (or to delete)
	Error    string    `json:"error,omitempty"`    // why it could not be removed; it stays
}

// GCResult is what a retention pass did.
type GCResult struct {
	DryRun  bool    `json:"dry_run,omitempty"`
	Removed []GCRun `json:"removed"`
	// Kept are the runs a bound reached that stay: unfinished, pinned,
	// delivered, continued by a run that stays, or failing to go.
	Kept []GCRun `json:"kept"`
	// PoolTrees are the idle worktrees removed from the pools (TrimPools);
	// one with an error stays.
	PoolTrees []worktree.TrimmedTree `json:"pool_trees"`
}

// TrimPools removes the idle trees of the state folder's worktree pools
// that are not worth keeping (worktree.TrimPools): those of repositories
// not in repos (the factory file's), those idle longer than
// worktree.PoolIdleMaxAge, and the oldest beyond worktree.PoolIdleMax per
// repository. A tree an attempt has taken is never touched. With dryRun
// nothing changes.
func (s *State) TrimPools(repos map[string]*config.Repo, now time.Time, dryRun bool) ([]worktree.TrimmedTree, error) {
	keep := map[string]bool{}
	for _, rc := range repos {
		if repo, err := worktree.OpenRepo(rc.Path); err == nil {
			keep[repo.PoolName()] = true
		}
	}
	out, err := worktree.TrimPools(s.Dir, keep, now, dryRun)
	if out == nil {
		out = []worktree.TrimmedTree{}
	}
	return out, err
}

// planGC decides which of runs (newest first, as State.Runs lists them) go:
// pipelines' runs and sandbox runs each against their own bound, a run
// going when it ended before now-MaxAge or is beyond the newest MaxRuns
// of the runs that may go. Unfinished, pinned and delivered runs never go
// and do not count; a run another staying run continues stays with it.
func planGC(runs []*record.RunRecord, pinned func(id string) bool, p Retention, now time.Time) (remove, kept []GCRun) {
	item := func(r *record.RunRecord, why string) GCRun {
		return GCRun{Run: r.ID, Pipeline: r.Pipeline, State: string(r.State), Ended: r.Ended(), Why: why}
	}
	going := map[string]GCRun{}
	var order []string
	counts := map[bool]int{}
	for _, r := range runs {
		bound := p
		if r.SandboxRun() {
			bound = forSandbox(p)
		}
		var why string
		protected := ""
		switch {
		case !r.State.Final():
			protected = "the run is " + string(r.State)
		case pinned(r.ID):
			protected = "pinned (kusaw runs unpin " + r.ID + " lets it go)"
		case r.Delivered():
			protected = "delivered"
		}
		if protected == "" {
			counts[r.SandboxRun()]++
		}
		switch {
		case bound.MaxAge > 0 && r.Ended().Before(now.Add(-bound.MaxAge)):
			why = "ended more than " + fmtAge(bound.MaxAge) + " ago"
		case protected == "" && bound.MaxRuns > 0 && counts[r.SandboxRun()] > bound.MaxRuns:
			why = fmt.Sprintf("beyond the newest %d", bound.MaxRuns)
		}
		if r.SandboxRun() && why != "" {
			why = "sandbox run " + why
		}
		switch {
		case why == "":
		case protected != "":
			kept = append(kept, item(r, protected))
		default:
			going[r.ID] = item(r, why)
			order = append(order, r.ID)
		}
	}
	// A follow-up continues its predecessor's branch and names the first
	// run of its thread: while it stays, they stay (to a fixed point, as
	// a chain can be long).
	for changed := true; changed; {
		changed = false
		for _, r := range runs {
			if _, gone := going[r.ID]; gone {
				continue
			}
			for _, dep := range []string{r.Continues, r.Thread} {
				if g, ok := going[dep]; ok {
					delete(going, dep)
					g.Why = "continued by " + r.ID
					kept = append(kept, g)
					changed = true
				}
			}
		}
	}
	for _, id := range order {
		if g, ok := going[id]; ok {
			remove = append(remove, g)
		}
	}
	return remove, kept
}

// fmtAge writes a duration in days when it is whole days.
func fmtAge(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// Pinned reports whether kusaw runs pin marked the run to keep.
func (s *State) Pinned(id string) bool {
	if !record.ValidName(id) {
		return false
	}
	_, err := os.Lstat(filepath.Join(s.RunDir(id), record.PinFile))
	return err == nil
}

// Pin marks a run (a unique prefix of its id) to be kept by retention, or
// with pin false lets it go again.
func (s *State) Pin(id string, pin bool) (*record.RunRecord, error) {
	r, err := s.LoadRun(id)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(s.RunDir(r.ID), record.PinFile)
	if !pin {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return r, err
		}
		return r, nil
	}
	return r, os.WriteFile(p, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), record.FileMode())
}

// GC removes the runs retention lets go: each run's records (its folder
// under the state folder), its worktrees and its kusaw/ branches in its
// repos. A run is removed under its own lock, the one its executor holds
// while it runs, so a run being run, resumed or delivered is left alone;
// its record is read again under the lock. With dryRun nothing changes.
func (s *State) GC(p Retention, now time.Time, dryRun bool) (*GCResult, error) {
	s.sweepGC()
	runs, err := s.Runs()
	if err != nil {
		return nil, err
	}
	remove, kept := planGC(runs, s.Pinned, p, now)
	res := &GCResult{DryRun: dryRun, Kept: kept, Removed: []GCRun{}}
	if res.Kept == nil {
		res.Kept = []GCRun{}
	}
	bl := &branchLists{}
	for _, g := range remove {
		if dryRun {
			g.Branches = s.runBranches(g.Run, bl)
			res.Removed = append(res.Removed, g)
			continue
		}
		if err := s.removeRun(&g, bl); err != nil {
			g.Error = err.Error()
			res.Kept = append(res.Kept, g)
			continue
		}
		res.Removed = append(res.Removed, g)
	}
	return res, nil
}

// branchLists holds each repository's kusaw branches by run, listed once
// per pass (one git process per repository, not one per run).
type branchLists struct {
	byRepo map[string]map[string]map[string]string
}

func (bl *branchLists) of(repo *worktree.Repo, id string) (map[string]string, error) {
	if bl.byRepo == nil {
		bl.byRepo = map[string]map[string]map[string]string{}
	}
	all, ok := bl.byRepo[repo.CommonDir]
	if !ok {
		var err error
		if all, err = repo.KusawBranches(); err != nil {
			return nil, err
		}
		bl.byRepo[repo.CommonDir] = all
	}
	return all[id], nil
}

func (bl *branchLists) forget(repo *worktree.Repo, id string) {
	delete(bl.byRepo[repo.CommonDir], id)
}

// runBranches lists a run's branches in its repos, for a dry run.
func (s *State) runBranches(id string, bl *branchLists) []string {
	r, err := s.LoadRun(id)
	if err != nil {
		return nil
	}
	var out []string
	for _, rr := range r.Repos {
		repo, err := worktree.OpenRepo(rr.Path)
		if err != nil {
			continue
		}
		bs, _ := bl.of(repo, id)
		for b := range bs {
			out = append(out, rr.Name+":"+b)
		}
	}
	sort.Strings(out)
	return out
}

// removeRun removes one run under its lock.
func (s *State) removeRun(g *GCRun, bl *branchLists) error {
	id := g.Run
	if !record.ValidName(id) {
		return fmt.Errorf("%q is not a run id", id)
	}
	dir := s.RunDir(id)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a run folder", dir)
	}
	l, ok, err := TryLock(filepath.Join(dir, record.LockFile))
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("held by another kusaw (running, resumed or being delivered)")
	}
	defer l.Unlock()
	r, err := s.LoadRun(id)
	if err != nil {
		return err
	}
	switch {
	case r.ID != id:
		return fmt.Errorf("its run.json names another run (%q)", r.ID)
	case !r.State.Final():
		return fmt.Errorf("the run is %s", r.State)
	case s.Pinned(id):
		return errors.New("pinned")
	case r.Delivered():
		return errors.New("delivered")
	case !r.Ended().Equal(g.Ended):
		// Resumed since the pass listed the branches: it may have made
		// more. The next pass decides on it again.
		return errors.New("the run changed since this pass began")
	}
	// Branches and worktrees first: a run whose branches could not go
	// keeps its record, so the next pass tries again.
	for _, rr := range r.Repos {
		repo, err := worktree.OpenRepo(rr.Path)
		if err != nil {
			if _, serr := os.Stat(rr.Path); errors.Is(serr, os.ErrNotExist) {
				continue // the repository is gone, and its branches with it
			}
			return err
		}
		if wts, err := repo.ListKusawWorktrees(); err == nil {
			for _, w := range wts {
				if within(dir, w.Path) {
					if err := repo.RemoveWorktree(w); err != nil {
						return err
					}
				}
			}
		}
		branches, err := bl.of(repo, id)
		if err != nil {
			return err
		}
		deleted, left, err := repo.DeleteBranchesOf(id, branches)
		sort.Strings(deleted)
		for _, b := range deleted {
			g.Branches = append(g.Branches, rr.Name+":"+b)
		}
		if err != nil {
			return err
		}
		bl.forget(repo, id) // a repo named twice: its branches are gone
		if len(left) > 0 {
			return fmt.Errorf("branch %s is checked out in %s (switch that checkout to another branch)", strings.Join(left, ", "), rr.Path)
		}
	}
	// Renamed first, so a folder half removed is never listed as a run;
	// sweepGC finishes one a crash left.
	trash := filepath.Join(s.Dir, record.RunsDir, record.GCPrefix+id)
	if err := os.Rename(dir, trash); err != nil {
		return err
	}
	os.Remove(filepath.Join(s.Dir, record.ActiveDir, id))
	return removeTree(trash)
}

// sweepGC finishes removals a crash interrupted.
func (s *State) sweepGC() {
	entries, _ := os.ReadDir(filepath.Join(s.Dir, record.RunsDir))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), record.GCPrefix) && e.IsDir() {
			_ = removeTree(filepath.Join(s.Dir, record.RunsDir, e.Name()))
		}
	}
}

// removeTree removes a folder, also where a step took away write
// permission from its own folders (artifacts/). It never follows links.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
