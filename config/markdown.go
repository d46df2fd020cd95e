package config

import (
	"fmt"
	"strings"
)

// ValidationMarkdown renders docs/reference/validation.md from CodeInfo.
func ValidationMarkdown() string {
	var b strings.Builder
	b.WriteString("# Validation codes\n\n")
	b.WriteString("<!-- Generated from package config by `make docs`; do not edit. A test fails when this page is stale. -->\n\n")
	b.WriteString("`kusaw validate` reports each problem with one of these codes, the file:line:column, a message and a fix. Errors (E) make the file invalid (exit 3); warnings (W) do not.\n\n")
	b.WriteString("| code | meaning |\n|---|---|\n")
	for _, c := range CodeInfo {
		fmt.Fprintf(&b, "| `%s` | %s |\n", c.Code, c.Meaning)
	}
	return b.String()
}
