package layering

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citation is how a comment points at the docs: docs/FILE.md, "Heading".
var citation = regexp.MustCompile(`docs/([a-z0-9/_-]+\.md), "([^"]+)"`)

// Every comment that cites a heading of the docs cites one the page has:
// a reader who follows it finds the section, and a renamed heading fails
// here rather than leaving the pointer dangling.
func TestDocCitationsExist(t *testing.T) {
	headings := map[string]map[string]bool{}
	heads := func(page string) map[string]bool {
		if h, ok := headings[page]; ok {
			return h
		}
		h := map[string]bool{}
		f, err := os.Open(filepath.Join("..", "..", "docs", page))
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if l := sc.Text(); strings.HasPrefix(l, "#") {
					h[strings.TrimSpace(strings.TrimLeft(l, "#"))] = true
				}
			}
			f.Close()
		}
		headings[page] = h
		return h
	}
	found := 0
	err := filepath.WalkDir(filepath.Join("..", ".."), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			c := strings.Index(line, "//")
			if c < 0 {
				continue
			}
			for _, m := range citation.FindAllStringSubmatch(line[c:], -1) {
				found++
				if !heads(m[1])[m[2]] {
					t.Errorf("%s:%d cites docs/%s, %q: the page has no such heading", p, i+1, m[1], m[2])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Errorf("only %d citations found: the scan is broken", found)
	}
}
