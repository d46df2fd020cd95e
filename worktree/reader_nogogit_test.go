//go:build kusaw_nogogit

package worktree

// plainReader is the backend that reads a plain repository in the kusaw
// CLI's build, which links no go-git: the git binary.
const plainReader = "git"
