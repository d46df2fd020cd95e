package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// PoolIdleMaxAge is how long an idle tree waits for the next attempt on
// its repository before kusaw gc removes it. A pooled tree is a cache, not
// a record: its worth is one checkout saved, which a factory in use
// collects within hours or days; a week unused means the repository's
// work has moved on, and a tree weighs what the repository does. It is
// not retention's max_age: that is how long people want to look at runs
// (often a month, or no age at all with --keep), unrelated to whether a
// checkout is worth keeping.
const PoolIdleMaxAge = 7 * 24 * time.Hour

// PoolName is the name of the repository's pool folder under
// <state_dir>/pool (what TrimPools is told to keep).
func (r *Repo) PoolName() string { return filepath.Base(r.Pool("").Dir()) }

// TrimmedTree is an idle pool tree kusaw gc removed (or would remove).
type TrimmedTree struct {
	Pool  string    `json:"pool"` // the pool folder: <repo>-<hash>
	Tree  string    `json:"tree"` // idle-<id>
	Idle  time.Time `json:"idle_since,omitzero"`
	Why   string    `json:"why"`
	Error string    `json:"error,omitempty"` // why it could not go; it stays
}

// trimClaimed is called by TrimPools between deciding that slot goes and
// claiming it by rename (tests).
var trimClaimed func(slot string)

// TrimPools removes from <stateDir>/pool the idle trees that are not worth
// keeping: every one of a pool whose repository keep does not name (no
// longer in the factory file), one idle longer than PoolIdleMaxAge, and
// the oldest beyond PoolIdleMax. Only idle slots are candidates: a tree an
// attempt took is in that attempt's folder, and a slot is claimed by the
// same rename an attempt takes it with (to .gc-<id>), so of gc and an
// attempt only one gets it; a slot taken meanwhile is left alone. Nothing
// is followed out of the pool folder: a pool folder that is a link is
// skipped, a slot that is a link loses only the link. dryRun changes
// nothing; without it, what crashed releases and gc passes left is swept
// too. Trees are listed oldest first.
func TrimPools(stateDir string, keep map[string]bool, now time.Time, dryRun bool) ([]TrimmedTree, error) {
	root := filepath.Join(stateDir, "pool")
	fi, err := os.Lstat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder (fix: remove it; the next attempts check out afresh)", root)
	}
	pools, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []TrimmedTree
	for _, pe := range pools {
		if !pe.IsDir() { // a link or a file: not kusaw's pool
			continue
		}
		p := &Pool{dir: filepath.Join(root, pe.Name()), max: PoolIdleMax}
		out = append(out, p.trim(keep[pe.Name()], now, dryRun)...)
	}
	return out, nil
}

// trim is TrimPools for one pool.
func (p *Pool) trim(kept bool, now time.Time, dryRun bool) []TrimmedTree {
	name := filepath.Base(p.dir)
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return []TrimmedTree{{Pool: name, Why: "cannot list the pool", Error: err.Error()}}
	}
	type slot struct {
		name string
		idle time.Time
	}
	var slots []slot
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), "idle-"):
			s := slot{name: e.Name()}
			// Idle since its release: the base file is written then, in
			// a folder only kusaw writes.
			if fi, err := os.Lstat(filepath.Join(p.dir, e.Name(), "base")); err == nil && fi.Mode().IsRegular() && e.IsDir() {
				s.idle = fi.ModTime()
			}
			slots = append(slots, s)
		case strings.HasPrefix(e.Name(), ".gc-") && !dryRun:
			_ = forceRemoveAll(filepath.Join(p.dir, e.Name())) // an interrupted pass's
		}
	}
	// Newest first: the count keeps the most recently released.
	sort.SliceStable(slots, func(i, j int) bool { return slots[i].idle.After(slots[j].idle) })
	var out []TrimmedTree
	for i, s := range slots {
		why := ""
		switch {
		case !kept:
			why = "its repository is not in the factory file"
		case s.idle.IsZero():
			why = "incomplete slot"
		case now.Sub(s.idle) > PoolIdleMaxAge:
			why = "idle more than " + fmtDays(PoolIdleMaxAge)
		case i >= p.max:
			why = "beyond the newest " + strconv.Itoa(p.max)
		}
		if why == "" {
			continue
		}
		t := TrimmedTree{Pool: name, Tree: s.name, Idle: s.idle, Why: why}
		if !dryRun {
			slotPath := filepath.Join(p.dir, s.name)
			if trimClaimed != nil {
				trimClaimed(slotPath)
			}
			claim := filepath.Join(p.dir, ".gc-"+strings.TrimPrefix(s.name, "idle-"))
			if err := os.Rename(slotPath, claim); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // an attempt took it: it is in use, not idle
				}
				t.Error = err.Error()
			} else if err := forceRemoveAll(claim); err != nil {
				t.Error = err.Error()
			}
		}
		out = append(out, t)
	}
	if !dryRun {
		p.sweep()
		if !kept {
			// Empty now (no tree in use holds an index in held/): the
			// pool itself goes; os.Remove removes only empty folders.
			_ = os.Remove(filepath.Join(p.dir, "held"))
			_ = os.Remove(p.dir)
		}
	}
	// Oldest first, as a listing reads.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Idle.Before(out[j].Idle) })
	return out
}

func fmtDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return d.String()
}
