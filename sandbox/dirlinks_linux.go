package sandbox

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// linkNames lists the symbolic links in folder d, in lexical order. A
// PATH folder of shims holds a hundred programs and a handful of links:
// read with getdents, the others cost no allocation and no sort
// (docs/benchmarks.md, "Lean start, eleventh pass (issue 25)").
func linkNames(d string) []string {
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	entries, _ := scanEntries(fd, make([]byte, 8<<10), func(typ byte) bool {
		return typ == unix.DT_LNK || typ == unix.DT_UNKNOWN
	})
	var out []string
	for _, e := range entries {
		if e.typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(d, e.name), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
				continue
			}
		}
		out = append(out, e.name)
	}
	return out
}
