//go:build !linux

package sandbox

// unreadableBelow: the walk by path (the view of /etc is bubblewrap's).
func unreadableBelow(root string) []unreadable { return unreadableBelowWalk(root) }

// walkOnGoroutine walks root on a goroutine and sends the list to ch.
func walkOnGoroutine(root string, ch chan<- []unreadable) (help func() ([]unreadable, bool)) {
	go func() { ch <- unreadableBelow(root) }()
	return func() ([]unreadable, bool) { return nil, false }
}

// systemUnreadable: the walk by path, every time.
func systemUnreadable(root string) []unreadable { return unreadableBelow(root) }

// walkCacheFolder: no walk is remembered.
func walkCacheFolder() string { return "" }
