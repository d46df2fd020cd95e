// Package worktree manages run branches and per-attempt git worktrees with
// the git binary, and reads refs, commits and diffs with go-git.
package worktree
