// Command testreport reads `go test -json` on stdin and prints what a person
// wants from a test run: go test's own closing line per package, the whole
// output of every failed test (and of a package that failed outside a
// test), each skipped test with its reason, the slowest tests (where make
// test's time goes) and one count at the end. make test uses it so that a
// long run never fails without saying why.
//
//	go test -json ./... | go run ./internal/testreport -summary FILE
//
// It exits 1 when any test or package failed (go test's own status is kept
// by the caller with pipefail as well).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64
	ImportPath string
}

// counts is what the run did, written to -summary for make test's last line.
type counts struct {
	Packages, Passed, Failed, Skipped, PkgFailed int
}

func main() {
	summary := flag.String("summary", "", "write the counts to this file as 'packages passed failed skipped'")
	flag.Parse()
	c, err := report(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if *summary != "" {
		os.WriteFile(*summary, fmt.Appendf(nil, "%d %d %d %d\n", c.Packages, c.Passed, c.Failed, c.Skipped), 0o644)
	}
	fmt.Printf("packages: %d tested, %d failed\n", c.Packages, c.PkgFailed)
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", c.Passed, c.Failed, c.Skipped)
	if c.Failed > 0 || c.PkgFailed > 0 {
		os.Exit(1)
	}
}

// slowest is how many of the slowest tests the report names.
const slowest = 12

func report(r io.Reader, w io.Writer) (counts, error) {
	var c counts
	out := map[string][]string{} // package/test → its output lines so far
	key := func(e event) string { return e.Package + "\x00" + e.Test }
	var skipped []string
	var timed []event // top-level tests that ended, for the slowest
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			// Not an event (a build error printed by go itself): show it.
			fmt.Fprintln(w, string(line))
			continue
		}
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "output":
			out[key(e)] = append(out[key(e)], e.Output)
		case "pass", "fail", "skip":
			k := key(e)
			lines := out[k]
			delete(out, k)
			if e.Test == "" {
				c.Packages++
				for _, l := range lines {
					// go test's own package lines: "ok  pkg 1.2s", "FAIL pkg",
					// "?  pkg [no test files]", and anything printed outside
					// a test when the package failed.
					if e.Action == "fail" || strings.HasPrefix(l, "ok  ") || strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "?   ") {
						fmt.Fprint(w, l)
					}
				}
				if e.Action == "fail" {
					c.PkgFailed++
				}
				continue
			}
			if !strings.Contains(e.Test, "/") {
				timed = append(timed, e)
			}
			switch e.Action {
			case "pass":
				c.Passed++
			case "skip":
				c.Skipped++
				skipped = append(skipped, fmt.Sprintf("--- SKIP %s %s: %s", e.Package, e.Test, lastReason(lines)))
			case "fail":
				c.Failed++
				fmt.Fprintf(w, "=== FAILED %s %s (%.1fs)\n", e.Package, e.Test, e.Elapsed)
				for _, l := range lines {
					fmt.Fprint(w, l)
				}
			}
		}
	}
	sort.Strings(skipped)
	for _, s := range skipped {
		fmt.Fprintln(w, s)
	}
	// Parallel tests overlap: their times add up to more than the run.
	sort.SliceStable(timed, func(i, j int) bool { return timed[i].Elapsed > timed[j].Elapsed })
	if len(timed) > slowest {
		timed = timed[:slowest]
	}
	for _, e := range timed {
		fmt.Fprintf(w, "slow: %6.1fs %s %s\n", e.Elapsed, e.Package, e.Test)
	}
	return c, sc.Err()
}

// lastReason is the skip message: the last non-status output line.
func lastReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "(no reason given)"
}
