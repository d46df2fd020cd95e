package cluster

import "golang.org/x/sys/unix"

// diskFree is the room an unprivileged user has on the disk dir is on
// (0 when it cannot be told).
func diskFree(dir string) int64 {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
