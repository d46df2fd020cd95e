package worktree

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// git worktree add picks the administrative directory's name from the
// worktree's base name, and two adds at once can pick the same one ("failed
// to read .git/worktrees/app2/commondir"); every attempt's worktree of a
// repo has the same base name. So add, remove and prune are serialised per
// repository: a mutex within this process and a lock file for other kusaw
// processes on the same repository.
var (
	repoLocksMu sync.Mutex
	repoLocks   = map[string]*sync.Mutex{}
)

const lockFileName = "kusaw-worktree.lock"

func (r *Repo) lockWorktrees() (unlock func()) {
	repoLocksMu.Lock()
	mu := repoLocks[r.CommonDir]
	if mu == nil {
		mu = &sync.Mutex{}
		repoLocks[r.CommonDir] = mu
	}
	repoLocksMu.Unlock()
	mu.Lock()
	f, err := os.OpenFile(filepath.Join(r.CommonDir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		// A read-only .git still works for this process; only cross-process
		// exclusion is lost.
		return mu.Unlock
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
		mu.Unlock()
	}
}
