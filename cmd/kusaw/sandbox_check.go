package main

import (
	"fmt"
	"io"
	"os"

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
		RunE: func(c *cobra.Command, args []string) error {
			return a.checkSandbox(verbose, newPrinter(a.stdout, asJSON, printCheck))
		},
	}
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print what the sandbox protects and what it does not")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

// checkReport is kusaw sandbox check's answer; with --verbose also what
// the sandbox protects, its kernel layers and how limits are enforced.
type checkReport struct {
	sandbox.CheckResult
	Protects     []string          `json:"protects,omitempty"`
	NotProtected []string          `json:"not_protected,omitempty"`
	Resources    map[string]string `json:"resources,omitempty"`
	Layers       []sandbox.Layer   `json:"layers,omitempty"`
	verbose      bool
}

// checkSandbox is kusaw sandbox check: the backend's check, printed; exit
// 4 when it is not available.
func (a *app) checkSandbox(verbose bool, p printer[*checkReport]) error {
	r := &checkReport{CheckResult: sandboxCheck(), verbose: verbose}
	if verbose {
		r.Layers = sandbox.KernelLayers(r.CheckResult)
		if r.Available && r.Backend == "bubblewrap" {
			r.Layers = append(r.Layers, sandbox.WriteLayerState(a.layerCheckDir()))
		}
		r.Protects, r.NotProtected = sandbox.ProtectionLists(r.Backend)
		r.Resources = proc.Enforcement()
	}
	p.Print(r)
	if !r.Available {
		return silentExit(status.ExitSandboxUnavailable)
	}
	return nil
}

// printCheck is kusaw sandbox check's text.
func printCheck(w io.Writer, r *checkReport) {
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
	if !r.verbose {
		return
	}
	if len(r.Layers) > 0 {
		fmt.Fprintf(w, "\nLayers:\n")
		for _, l := range r.Layers {
			state := "active"
			if !l.Active {
				state = "MISSING"
			}
			fmt.Fprintf(w, "  - %-10s %s: %s\n", l.Name+":", state, l.Detail)
		}
	}
	fmt.Fprintf(w, "\nWhat the sandbox protects:\n")
	for _, p := range r.Protects {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	fmt.Fprintf(w, "\nWhat it does not protect:\n")
	for _, p := range r.NotProtected {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	printResources(w, r.Resources)
}

// printResources says how this machine enforces each sandbox.resources
// limit for a kusaw run as this user, now.
func printResources(w io.Writer, e map[string]string) {
	fmt.Fprintf(w, "\nResource limits (sandbox.resources) on this machine, for this user:\n")
	for _, k := range []string{proc.LimitPids, proc.LimitMemory, proc.LimitCPU, proc.LimitDisk, proc.LimitOutput} {
		fmt.Fprintf(w, "  - %-7s %s\n", k+":", e[k])
	}
}

// layerCheckDir is where check --verbose tries a write layer: the
// factory's state folder, whose filesystem holds the real layers, when a
// factory file is found; else the temp folder.
func (a *app) layerCheckDir() string {
	if f, err := a.loadFactory(); err == nil && f.StateDir != "" {
		if fi, err := os.Stat(f.StateDir); err == nil && fi.IsDir() {
			return f.StateDir
		}
	}
	return os.TempDir()
}
