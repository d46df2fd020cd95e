package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/spf13/cobra"
)

func init() { addCommand(newShowCmd) }

func newShowCmd(a *app) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "show a run: its steps, attempts, outcomes, reasons, durations and branches",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			st, err := a.openStore()
			if err != nil {
				return err
			}
			r, err := loadRun(st, args[0])
			if err != nil {
				return err
			}
			attempts, _ := st.Attempts(r)
			if jsonOut {
				b, _ := json.MarshalIndent(map[string]any{"run": r, "attempts": attempts}, "", "  ")
				fmt.Fprintf(a.stdout, "%s\n", b)
				return nil
			}
			// Messages, argv and names may come from a step: control
			// characters are made visible on a terminal.
			w := forTerminal(a.stdout)
			defer flushSafe(w)
			fmt.Fprintf(w, "run %s  pipeline %s  %s  %s\n", r.ID, r.Pipeline, r.State, runDuration(r))
			if r.Reason != "" {
				fmt.Fprintf(w, "  reason: %s: %s\n", r.Reason, r.Message)
				if r.Fix != "" {
					fmt.Fprintf(w, "  fix: %s\n", r.Fix)
				}
			}
			if r.Owner != nil {
				fmt.Fprintf(w, "  owner: pid %d\n", r.Owner.PID)
			}
			fmt.Fprintf(w, "  folder: %s\n", st.RunDir(r.ID))
			if r.Usage != nil {
				fmt.Fprintf(w, "  usage: %s\n", usageLine(r.Usage))
			}
			for _, rr := range r.Repos {
				fmt.Fprintf(w, "  repo %s: %s %s → %s (base %s)\n", rr.Name, rr.Branch, short(rr.BaseSHA), short(rr.HeadSHA), orDash(rr.Base))
			}
			if d := r.Delivery; d != nil {
				fmt.Fprintf(w, "  delivery (%s): %s", d.Repo, d.State)
				if d.Merged != "" {
					fmt.Fprintf(w, ", merged into %s at %s", d.Into, short(d.Merged))
				}
				if d.Pushed != "" {
					fmt.Fprintf(w, ", pushed to %s", d.Pushed)
				}
				if d.PullURL != "" {
					fmt.Fprintf(w, ", pull request %s", d.PullURL)
				}
				fmt.Fprintln(w)
				if d.State != record.DeliveryDone {
					fmt.Fprintf(w, "    %s failed: %s\n    fix: %s\n", d.Failed, d.Message, d.Fix)
				}
			}
			for _, s := range r.Steps {
				outcome := string(s.Outcome)
				if outcome == "" {
					outcome = "pending"
				}
				fmt.Fprintf(w, "step %s: %s", s.ID, outcome)
				if s.Reason != "" {
					fmt.Fprintf(w, " (%s)", s.Reason)
				}
				if s.Usage != nil {
					fmt.Fprintf(w, "  %s, %s tokens", fmtCost(s.Usage), fmtTokens(s.Usage.Tokens()))
				}
				fmt.Fprintln(w)
				first := s.FirstAttempt
				if first == 0 {
					first = 1
				}
				for _, at := range attempts {
					// A step listed twice shows each occurrence's attempts.
					if at.Step != s.ID || (s.Attempts > 0 && (at.Number < first || at.Number >= first+s.Attempts)) {
						continue
					}
					oc := string(at.Outcome)
					if oc == "" {
						oc = "running"
					}
					exit := ""
					if at.ExitCode != nil {
						exit = fmt.Sprintf(" exit %d", *at.ExitCode)
					}
					fmt.Fprintf(w, "  attempt %d/%d: %s%s  %s  sandbox %s (%s)\n", at.Number, at.Of, oc, exit, fmtDur(at.Duration()), at.Mode, at.ModeOrigin)
					if at.Reason != "" {
						fmt.Fprintf(w, "    reason: %s: %s\n", at.Reason, at.Message)
						if at.Fix != "" {
							fmt.Fprintf(w, "    fix: %s\n", at.Fix)
						}
					}
					if at.Usage != nil {
						fmt.Fprintf(w, "    usage: %s\n", usageLine(at.Usage))
						for _, m := range at.Usage.ModelNames() {
							mu := at.Usage.Models[m]
							mc := "-"
							if mu.CostUSD != nil {
								mc = fmt.Sprintf("$%.4f", *mu.CostUSD)
							}
							fmt.Fprintf(w, "      %s: %s, input %s, output %s\n", m, mc, fmtTokens(mu.InputTokens), fmtTokens(mu.OutputTokens))
						}
					}
					if at.Egress != nil {
						fmt.Fprintf(w, "    egress: %d connection(s), %d B up, %d B down, %d refused (egress.log)\n", at.Egress.Connections, at.Egress.BytesUp, at.Egress.BytesDown, at.Egress.Refusals)
					}
					for _, wt := range at.Worktrees {
						ch := ""
						if wt.Changed {
							ch = " (changed)"
						}
						fmt.Fprintf(w, "    %s: %s at %s%s\n", wt.Repo, wt.Branch, short(wt.HeadSHA), ch)
					}
					for _, p := range at.Processes {
						if len(p.Argv) > 0 {
							fmt.Fprintf(w, "    argv: %s\n", clip(strings.Join(p.Argv, " "), 100))
						}
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the run and attempt records as JSON")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "HEAD"
	}
	return s
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
