package config

import (
	"flag"
	"testing"

	"github.com/kusaw/kusaw/internal/generated"
)

var update = flag.Bool("update", false, "rewrite the generated reference page")

func TestValidationPageFresh(t *testing.T) {
	generated.CheckPage(t, "../docs/reference/validation.md", ValidationMarkdown(), *update)
}
