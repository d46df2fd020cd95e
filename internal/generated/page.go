// Package generated checks that a reference page generated from code is up
// to date, and rewrites it when asked (make docs passes -update).
package generated

import (
	"os"
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
