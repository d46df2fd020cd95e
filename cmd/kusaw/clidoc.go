package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kusaw/kusaw/status"
)

// cliMarkdown renders docs/cli.md from the command tree itself, so the page
// always says what the binary does.
func cliMarkdown() string {
	root := newRootCmd(&app{})
	var b strings.Builder
	b.WriteString("# kusaw commands\n\n")
	b.WriteString("<!-- Generated from the command tree by `make docs`; do not edit. A test fails when this page is stale. -->\n\n")
	b.WriteString("Every command that reads the factory file takes `-f/--file FILE`; without it kusaw uses `factory.yaml` in the current folder, then `$KUSAW_CONFIG`.\n\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		subs := c.Commands()
		sort.Slice(subs, func(i, j int) bool { return subs[i].Name() < subs[j].Name() })
		for _, s := range subs {
			if s.Hidden || s.Name() == "help" || s.Name() == "completion" {
				continue
			}
			if s.Runnable() {
				writeCommand(&b, s)
			}
			walk(s)
		}
	}
	walk(root)
	b.WriteString("## Exit codes\n\n| code | name | when |\n|---|---|---|\n")
	for _, e := range status.ExitCodes {
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", e.Code, e.Name, e.Meaning)
	}
	return b.String()
}

func writeCommand(b *strings.Builder, c *cobra.Command) {
	path := c.CommandPath()
	use := c.Use
	if i := strings.IndexByte(use, ' '); i >= 0 {
		use = use[i:]
	} else {
		use = ""
	}
	fmt.Fprintf(b, "## %s\n\n`%s%s`\n\n%s\n\n", path, path, use, sentence(c.Short))
	if c.Long != "" {
		fmt.Fprintf(b, "%s\n\n", strings.TrimSpace(c.Long))
	}
	var flags []string
	c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0" {
			def = " (default " + f.DefValue + ")"
		}
		flags = append(flags, fmt.Sprintf("| `%s` | %s%s |", name, f.Usage, def))
	})
	if len(flags) > 0 {
		b.WriteString("| flag | meaning |\n|---|---|\n")
		b.WriteString(strings.Join(flags, "\n"))
		b.WriteString("\n\n")
	}
}

func sentence(s string) string {
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}
