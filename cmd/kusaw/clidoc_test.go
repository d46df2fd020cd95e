package main

import (
	"flag"
	"os"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite generated docs")

func TestCLIPageFresh(t *testing.T) {
	const page = "../../docs/cli.md"
	want := cliMarkdown()
	if *updateDocs {
		if err := os.WriteFile(page, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(page)
	if err != nil {
		t.Fatalf("%v (generate it: make docs)", err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run make docs", page)
	}
}
