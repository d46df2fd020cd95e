package main

import (
	"strings"
	"testing"
)

// TestReport: a failed test's whole output is shown, a passing test's is
// not, a skip shows its reason, and the counts add up.
func TestReport(t *testing.T) {
	in := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"quiet line\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.1}
{"Action":"pass","Package":"p","Test":"TestA/sub","Elapsed":9.5}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: the reason it broke\n"}
{"Action":"fail","Package":"p","Test":"TestB","Elapsed":0.2}
{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: needs a GPU\n"}
{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.3s\n"}
{"Action":"fail","Package":"p","Elapsed":0.3}
not json: a build error
`
	var b strings.Builder
	c, err := report(strings.NewReader(in), &b)
	if err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"=== FAILED p TestB", "the reason it broke", "FAIL\tp\t0.3s", "--- SKIP p TestC: c_test.go:3: needs a GPU", "not json: a build error"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	// The slowest first; a subtest's time is its parent's already.
	if i, j := strings.Index(got, "slow:    0.2s p TestB"), strings.Index(got, "slow:    0.1s p TestA"); i < 0 || j < i || strings.Contains(got, "TestA/sub") {
		t.Errorf("slowest tests not listed slowest first, without subtests:\n%s", got)
	}
	if strings.Contains(got, "quiet line") {
		t.Errorf("a passing test's output was printed:\n%s", got)
	}
	if c != (counts{Packages: 1, Passed: 2, Failed: 1, Skipped: 1, PkgFailed: 1}) {
		t.Errorf("counts %+v", c)
	}
}
