package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("usage", newUsageCmd) }

// usageRow is one line of kusaw usage: a pipeline, a step or a day.
type usageRow struct {
	Key   string        `json:"key"`
	Runs  int           `json:"runs"`
	Usage *record.Usage `json:"usage,omitempty"`
}

// usageReport is kusaw usage --json.
type usageReport struct {
	Since string        `json:"since,omitempty"`
	By    string        `json:"by"`
	Rows  []usageRow    `json:"rows"`
	Total *record.Usage `json:"total,omitempty"`
	Runs  int           `json:"runs"`
}

// usage is kusaw usage: the runs' usage summed by pipeline, step or day.
func (a *app) usage(by string, since time.Duration, p printer[usageReport]) error {
	if by != "pipeline" && by != "step" && by != "day" {
		return exitf(status.ExitUsage, "--by %q: use pipeline, step or day", by)
	}
	if since < 0 {
		return exitf(status.ExitUsage, "--since must be a positive duration such as 24h or 168h")
	}
	st, err := a.openStore()
	if err != nil {
		return err
	}
	runs, err := st.Runs()
	if err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	p.Print(sumUsage(runs, by, since, time.Now()))
	return nil
}

// printUsage is kusaw usage's table.
func printUsage(w io.Writer, rep usageReport) {
	if rep.Runs == 0 {
		fmt.Fprintln(w, "no runs in that time")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tRUNS\tATTEMPTS\tCOST\tTOKENS\tINPUT\tOUTPUT\tCACHE READ\tCACHE WRITE\n", strings.ToUpper(rep.By))
	line := func(key string, runs int, u *record.Usage) {
		if u == nil {
			fmt.Fprintf(tw, "%s\t%d\t-\t-\t-\t-\t-\t-\t-\n", key, runs)
			return
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", key, runs, u.Attempts, fmtCost(u), fmtTokens(u.Tokens()),
			fmtTokens(u.InputTokens), fmtTokens(u.OutputTokens), fmtTokens(u.CacheReadTokens), fmtTokens(u.CacheWriteTokens))
	}
	for _, r := range rep.Rows {
		line(r.Key, r.Runs, r.Usage)
	}
	line("total", rep.Runs, rep.Total)
	_ = tw.Flush()
}

func newUsageCmd(a *app) *cobra.Command {
	var jsonOut bool
	var since time.Duration
	var by string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "sum what the state folder's runs cost: tokens and USD by pipeline, step or day",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return a.usage(by, since, newPrinter(a.stdout, jsonOut, printUsage))
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the sums as JSON")
	cmd.Flags().DurationVar(&since, "since", 0, "only runs created within this long before now (e.g. 24h, 168h); default: all")
	cmd.Flags().StringVar(&by, "by", "pipeline", "group by pipeline, step or day (the run's local creation date)")
	return cmd
}

// sumUsage sums runs' usage (run.json's sums) by key. A step is counted
// in each run it ran in.
func sumUsage(runs []*record.RunRecord, by string, since time.Duration, now time.Time) usageReport {
	rep := usageReport{By: by, Rows: []usageRow{}}
	if since > 0 {
		rep.Since = now.Add(-since).UTC().Format(time.RFC3339)
	}
	rows := map[string]*usageRow{}
	add := func(key string, u *record.Usage) {
		r := rows[key]
		if r == nil {
			r = &usageRow{Key: key}
			rows[key] = r
		}
		r.Runs++
		r.Usage = record.Add(r.Usage, u)
	}
	for _, r := range runs {
		if since > 0 && r.Created.Before(now.Add(-since)) {
			continue
		}
		rep.Runs++
		rep.Total = record.Add(rep.Total, r.Usage)
		switch by {
		case "pipeline":
			add(r.Pipeline, r.Usage)
		case "day":
			add(r.Created.Local().Format("2006-01-02"), r.Usage)
		case "step":
			seen := map[string]bool{}
			for _, s := range r.Steps {
				if s.Started == nil {
					continue
				}
				if seen[s.ID] {
					// A step listed twice: its occurrences are one row.
					rows[s.ID].Usage = record.Add(rows[s.ID].Usage, s.Usage)
					continue
				}
				seen[s.ID] = true
				add(s.ID, s.Usage)
			}
		}
	}
	for _, r := range rows {
		rep.Rows = append(rep.Rows, *r)
	}
	sort.Slice(rep.Rows, func(i, j int) bool { return rep.Rows[i].Key < rep.Rows[j].Key })
	return rep
}

// fmtCost is a usage's cost for a table: "$0.0421", or "-" when the
// provider reported none (Cursor: tokens only).
func fmtCost(u *record.Usage) string {
	c, ok := u.Cost()
	if !ok {
		return "-"
	}
	return fmt.Sprintf("$%.4f", c)
}

// fmtTokens shortens a token count: 950, 12.3k, 4.56M.
func fmtTokens(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 1_000_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	}
}

// usageLine is a usage in one line for kusaw show.
func usageLine(u *record.Usage) string {
	if u == nil {
		return "not reported"
	}
	s := fmt.Sprintf("%s, %s tokens (input %s, output %s, cache read %s, cache write %s)", fmtCost(u), fmtTokens(u.Tokens()),
		fmtTokens(u.InputTokens), fmtTokens(u.OutputTokens), fmtTokens(u.CacheReadTokens), fmtTokens(u.CacheWriteTokens))
	if s[0] == '-' {
		s = "cost not reported" + s[1:]
	}
	if u.Turns > 0 {
		s += fmt.Sprintf(", %d turns", u.Turns)
	}
	return s
}
