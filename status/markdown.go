package status

import (
	"fmt"
	"strings"
)

// Markdown renders docs/reference/statuses.md from the enumerations.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Statuses, outcomes, reasons and exit codes\n\n")
	b.WriteString("<!-- Generated from package status by `make docs`; do not edit. A test fails when this page is stale. -->\n\n")
	b.WriteString("## Run states\n\n| state | meaning |\n|---|---|\n")
	for _, s := range RunStates {
		fmt.Fprintf(&b, "| `%s` | %s |\n", s.Value, s.Meaning)
	}
	b.WriteString("\n## Attempt outcomes\n\n| outcome | meaning |\n|---|---|\n")
	for _, o := range Outcomes {
		fmt.Fprintf(&b, "| `%s` | %s |\n", o.Value, o.Meaning)
	}
	b.WriteString("\n## Reasons\n\nEvery attempt and run that does not pass carries one of these codes in its record, with the message and the fix.\n\n| reason | what happened | what to do |\n|---|---|---|\n")
	for _, r := range Reasons {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Code, r.Message, escapePipes(r.Fix))
	}
	b.WriteString("\n## Exit codes of the kusaw command\n\n| code | name | when |\n|---|---|---|\n")
	for _, e := range ExitCodes {
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", e.Code, e.Name, e.Meaning)
	}
	return b.String()
}

func escapePipes(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
