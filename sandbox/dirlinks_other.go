//go:build !linux

package sandbox

import "os"

// linkNames lists the symbolic links in folder d, in lexical order.
func linkNames(d string) []string {
	ents, _ := os.ReadDir(d)
	var out []string
	for _, e := range ents {
		if e.Type()&os.ModeSymlink != 0 {
			out = append(out, e.Name())
		}
	}
	return out
}
