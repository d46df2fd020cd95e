package config

import (
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated reference page")

func TestValidationPageFresh(t *testing.T) {
	const page = "../docs/reference/validation.md"
	want := ValidationMarkdown()
	if *update {
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
