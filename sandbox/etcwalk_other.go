//go:build !linux

package sandbox

// unreadableBelow: the walk by path (the view of /etc is bubblewrap's).
func unreadableBelow(root string) []unreadable { return unreadableBelowWalk(root) }
