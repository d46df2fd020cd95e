package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("runs", newRunsCmd) }

func newRunsCmd(a *app) *cobra.Command {
	var jsonOut, all bool
	cmd := &cobra.Command{
		Use:   "runs [--all] [--json]",
		Short: "list the factory's runs, newest first (sandbox exec's and doctor's with --all)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			st, err := a.openStore()
			if err != nil {
				return err
			}
			runs, err := st.Runs()
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			hidden := 0
			if !all {
				runs, hidden = pipelineRuns(runs)
			}
			if jsonOut {
				if runs == nil {
					runs = []*record.RunRecord{}
				}
				b, _ := json.MarshalIndent(runs, "", "  ")
				fmt.Fprintf(a.stdout, "%s\n", b)
				return nil
			}
			if len(runs) == 0 && hidden == 0 {
				fmt.Fprintln(a.stdout, "no runs yet (start one with: kusaw run)")
				return nil
			}
			if len(runs) == 0 {
				fmt.Fprintf(a.stdout, "no pipeline runs yet (start one with: kusaw run); %d sandbox exec/doctor run%s: kusaw runs --all\n", hidden, plural(hidden, "s"))
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tPIPELINE\tSTATE\tSTARTED\tDURATION\tSTEPS\tCOST\tTOKENS\tTRIGGER\tREASON")
			for _, r := range runs {
				done := 0
				for _, s := range r.Steps {
					if s.Outcome == status.OutcomePassed {
						done++
					}
				}
				started := "-"
				if r.Started != nil {
					started = r.Started.Local().Format("2006-01-02 15:04:05")
				}
				cost, tokens := "-", "-"
				if r.Usage != nil {
					cost, tokens = fmtCost(r.Usage), fmtTokens(r.Usage.Tokens())
				}
				trigger := "-"
				if r.Trigger != nil {
					trigger = termSafe(r.Trigger.Label())
				}
				state := string(r.State)
				// The pin is a file in the run's folder, on this machine
				// whether serve is up or not.
				if _, err := os.Lstat(filepath.Join(st.RunDir(r.ID), record.PinFile)); err == nil {
					state += " (pinned)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", r.ID, r.Pipeline, state, started, runDuration(r), done, len(r.Steps), cost, tokens, trigger, r.Reason)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if hidden > 0 {
				fmt.Fprintf(a.stdout, "(%d sandbox exec/doctor run%s not shown: kusaw runs --all)\n", hidden, plural(hidden, "s"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the run records as JSON")
	cmd.Flags().BoolVar(&all, "all", false, "also list kusaw sandbox exec's and doctor's runs")
	cmd.AddCommand(newPinCmd(a, true), newPinCmd(a, false))
	return cmd
}

// pipelineRuns leaves out sandbox exec's and doctor's runs, and counts
// them.
func pipelineRuns(runs []*record.RunRecord) (out []*record.RunRecord, hidden int) {
	for _, r := range runs {
		if r.SandboxRun() {
			hidden++
			continue
		}
		out = append(out, r)
	}
	return out, hidden
}

// kusaw runs pin RUN and unpin RUN: retention (kusaw gc, serve's
// retention:) keeps a pinned run whatever its bounds.
func newPinCmd(a *app, pin bool) *cobra.Command {
	use, short := "pin RUN", "keep a run (its records and kusaw/ branches) whatever kusaw gc and retention: say"
	if !pin {
		use, short = "unpin RUN", "let kusaw gc and retention: remove a pinned run again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			st, err := a.openState()
			if err != nil {
				return err
			}
			if _, err := loadRun(st, args[0]); err != nil {
				return err
			}
			r, err := st.Pin(args[0], pin)
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			if pin {
				fmt.Fprintf(a.stdout, "pinned run %s: kusaw gc and retention keep it (kusaw runs unpin %s lets it go)\n", r.ID, r.ID)
			} else {
				fmt.Fprintf(a.stdout, "unpinned run %s: kusaw gc and retention may remove it\n", r.ID)
			}
			return nil
		},
	}
}
