package worktree

import "github.com/kusaw/kusaw/internal/rmtree"

// forceRemoveAll removes a tree whatever the step did to its folders'
// permissions, never following a link (rmtree.RemoveAll).
func forceRemoveAll(dir string) error { return rmtree.RemoveAll(dir) }
