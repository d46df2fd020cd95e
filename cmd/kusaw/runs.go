package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand(newRunsCmd) }

func newRunsCmd(a *app) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "list the factory's runs, newest first",
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
			if jsonOut {
				if runs == nil {
					runs = []*record.RunRecord{}
				}
				b, _ := json.MarshalIndent(runs, "", "  ")
				fmt.Fprintf(a.stdout, "%s\n", b)
				return nil
			}
			if len(runs) == 0 {
				fmt.Fprintln(a.stdout, "no runs yet (start one with: kusaw run)")
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", r.ID, r.Pipeline, r.State, started, runDuration(r), done, len(r.Steps), cost, tokens, trigger, r.Reason)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the run records as JSON")
	return cmd
}
