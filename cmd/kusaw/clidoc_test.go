package main

import (
	"flag"
	"testing"

	"github.com/kusaw/kusaw/internal/generated"
)

var updateDocs = flag.Bool("update", false, "rewrite generated docs")

func TestCLIPageFresh(t *testing.T) {
	generated.CheckPage(t, "../../docs/cli.md", cliMarkdown(), *updateDocs)
}
