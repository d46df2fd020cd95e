package worker

import (
	"context"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/worktree"
)

// holdsCommit reports whether the cache repository at path holds commit
// sha. Asked for every commit of every attempt before its step starts,
// so it is answered in-process where it can be (the repository stays
// open, worktree.OpenRepo), with a git process otherwise.
func holdsCommit(ctx context.Context, path, sha string) bool {
	if r, err := worktree.OpenRepo(path); err == nil {
		return r.HasCommit(sha)
	}
	return cluster.HasCommit(ctx, path, sha)
}
