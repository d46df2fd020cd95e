//go:build !kusaw_nogogit

package worktree

// plainReader is the backend that reads a plain repository: go-git, where
// it is linked.
const plainReader = "go-git"
