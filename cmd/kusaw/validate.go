package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/cluster/enroll"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("validate", newValidateCmd) }

func newValidateCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "validate [--json]",
		Short: "check factory.yaml: errors and warnings with codes, positions and fixes",
		Long: `Checks the factory file: its keys and types, references between repos,
steps and pipelines, paths, allowlist entries, and the combinations that
cannot do what they say. Each problem has a stable code (see
docs/reference/validation.md), a file:line:column, and a fix.

Exit codes: 0 valid (warnings allowed), 3 invalid, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return a.validate(newPrinter(a.stdout, asJSON, printReport))
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}

// validate is kusaw validate: the factory file's findings, printed; exit
// 3 when it is invalid.
func (a *app) validate(p printer[factory.Report]) error {
	path, err := a.factoryPath()
	if err != nil {
		return err
	}
	f, fs, err := config.Load(path)
	if err != nil {
		return exitf(status.ExitInvalidConfig, "%v", err)
	}
	for i := range fs {
		fs[i].File = relPath(fs[i].File)
	}
	v := factory.NewValidator()
	v.PoolsOffered = func() map[string]bool { return enroll.EverOffered(filepath.Join(f.StateDir, record.ClusterDir)) }
	v.PoolsAllowed = func() map[string]bool { return enroll.AllowedPools(filepath.Join(f.StateDir, record.ClusterDir)) }
	r := v.Validate(f, fs)
	r.File = relPath(r.File)
	for _, l := range [][]config.Finding{r.Errors, r.Warnings} {
		for i := range l {
			l[i].File = relPath(l[i].File)
		}
	}
	p.Print(r)
	if !r.OK {
		return silentExit(status.ExitInvalidConfig)
	}
	return nil
}

// printReport is kusaw validate's text: each finding, then the verdict.
func printReport(w io.Writer, r factory.Report) {
	for _, f := range r.Errors {
		fmt.Fprintln(w, f.String())
	}
	for _, f := range r.Warnings {
		fmt.Fprintln(w, f.String())
	}
	for _, s := range r.Steps {
		if len(s.LocalPorts) > 0 {
			fmt.Fprintf(w, "%s: step %s: local services: the host's loopback ports %s are leased (through the proxy, and on Linux straight from the sandbox's localhost)\n",
				r.File, s.ID, strings.Trim(fmt.Sprint(s.LocalPorts), "[]"))
		}
		if s.Setup != "" {
			fmt.Fprintf(w, "%s: step %s: setup runs %s\n", r.File, s.ID, s.Setup)
		}
	}
	if r.Sandbox != nil && !r.Sandbox.Available {
		fmt.Fprintf(w, "%s: sandbox: %s is not available here: %s (fix: %s)\n", r.File, r.Sandbox.Backend, r.Sandbox.Reason, r.Sandbox.Fix)
	}
	switch {
	case !r.OK:
		fmt.Fprintf(w, "%s: invalid: %d error(s), %d warning(s)\n", r.File, len(r.Errors), len(r.Warnings))
	case len(r.Warnings) > 0:
		fmt.Fprintf(w, "%s: valid, %d warning(s)\n", r.File, len(r.Warnings))
	default:
		fmt.Fprintf(w, "%s: valid\n", r.File)
	}
}
