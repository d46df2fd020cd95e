package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

func init() { sandboxSubcommands = append(sandboxSubcommands, newSandboxCheckCmd) }

// sandboxCheck is swappable so tests can show the unavailable case.
var sandboxCheck = sandbox.Check

func newSandboxCheckCmd(a *app) *cobra.Command {
	var verbose, asJSON bool
	c := &cobra.Command{
		Use:   "check [--verbose] [--json]",
		Short: "can this machine run the sandbox backend; --verbose prints what is and is not protected",
		Long: `Finds the backend (bubblewrap from a root-owned /usr/bin, /usr/local/bin or
/bin, never through PATH), reads its version and starts it once with the
namespaces every sandboxed step uses. On macOS: /usr/bin/sandbox-exec (root-owned,
not writable by others) runs a probe under a profile with every rule kind
kusaw writes, and a write the profile denies must fail.

Exit status: 0 when the backend is available, 4 when it is not (the reason
and the fix are printed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r := sandboxCheck()
			if asJSON {
				out := struct {
					sandbox.CheckResult
					Protects     []string          `json:"protects,omitempty"`
					NotProtected []string          `json:"not_protected,omitempty"`
					Resources    map[string]string `json:"resources,omitempty"`
					Layers       []sandbox.Layer   `json:"layers,omitempty"`
				}{CheckResult: r}
				if verbose {
					out.Layers = sandbox.KernelLayers(r)
					out.Protects, out.NotProtected = sandbox.ProtectionLists(r.Backend)
					out.Resources = proc.Enforcement()
				}
				b, _ := json.MarshalIndent(out, "", "  ")
				fmt.Fprintln(a.stdout, string(b))
			} else {
				printCheck(a, r, verbose)
				if verbose {
					printResources(a)
				}
			}
			if !r.Available {
				return silentExit(status.ExitSandboxUnavailable)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print what the sandbox protects and what it does not")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

func printCheck(a *app, r sandbox.CheckResult, verbose bool) {
	w := a.stdout
	fmt.Fprintf(w, "backend:   %s\n", r.Backend)
	if r.Path != "" {
		fmt.Fprintf(w, "path:      %s\n", r.Path)
	}
	if r.Version != "" {
		fmt.Fprintf(w, "version:   %s\n", r.Version)
	}
	if r.Available {
		fmt.Fprintf(w, "available: yes\n")
	} else {
		fmt.Fprintf(w, "available: no\n")
		fmt.Fprintf(w, "reason:    %s: %s\n", r.Reason, r.Msg)
		fmt.Fprintf(w, "fix:       %s\n", r.Fix)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note:      %s\n", n)
	}
	if !verbose {
		return
	}
	if layers := sandbox.KernelLayers(r); len(layers) > 0 {
		fmt.Fprintf(w, "\nLayers:\n")
		for _, l := range layers {
			state := "active"
			if !l.Active {
				state = "MISSING"
			}
			fmt.Fprintf(w, "  - %-10s %s: %s\n", l.Name+":", state, l.Detail)
		}
	}
	protects, notProtected := sandbox.ProtectionLists(r.Backend)
	fmt.Fprintf(w, "\nWhat the sandbox protects:\n")
	for _, p := range protects {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	fmt.Fprintf(w, "\nWhat it does not protect:\n")
	for _, p := range notProtected {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

// printResources says how this machine enforces each sandbox.resources
// limit for a kusaw run as this user, now.
func printResources(a *app) {
	e := proc.Enforcement()
	fmt.Fprintf(a.stdout, "\nResource limits (sandbox.resources) on this machine, for this user:\n")
	for _, k := range []string{proc.LimitPids, proc.LimitMemory, proc.LimitCPU, proc.LimitDisk, proc.LimitOutput} {
		fmt.Fprintf(a.stdout, "  - %-7s %s\n", k+":", e[k])
	}
}
