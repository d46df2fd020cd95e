// Package generated checks that a reference page generated from code is up
// to date, and rewrites it when asked (make docs passes -update).
package generated

import (
	"os"
	"strings"
	"testing"
)

// CheckPage fails t when the file at path does not hold want; with update
// it writes want there first.
func CheckPage(t testing.TB, path, want string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: make docs)", err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run make docs", path)
	}
}

// CheckSection is CheckPage for a generated part of a hand-written page:
// the lines between "<!-- begin NAME -->" and "<!-- end NAME -->" in the
// file at path must be want; with update they are rewritten first.
func CheckSection(t testing.TB, path, name, want string, update bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- begin "+name+" -->\n", "<!-- end "+name+" -->"
	page := string(b)
	i := strings.Index(page, begin)
	j := strings.Index(page, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q markers around the generated %s", path, strings.TrimSpace(begin), end, name)
	}
	i += len(begin)
	if update {
		page = page[:i] + want + page[j:]
		j = i + len(want)
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if page[i:j] != want {
		t.Fatalf("%s: its %s are stale: run make docs", path, name)
	}
}
