package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("gc", newGCCmd) }

// kusaw gc, not kusaw runs prune: it removes branches in the repositories
// as well as runs' records, as git gc tidies more than one kind of thing,
// and DESIGN names it so.
func newGCCmd(a *app) *cobra.Command {
	var olderThan string
	var keep int
	var dryRun, jsonOut bool
	cmd := &cobra.Command{
		Use:   "gc [--older-than AGE] [--keep N] [--dry-run] [--json]",
		Short: "remove old runs' records and their kusaw/ branches, keeping pinned, delivered and unfinished runs",
		Long: `Removes finished runs that ended longer ago than --older-than (30d, 2w,
36h) or are beyond the newest --keep N: each run's folder under the state
folder, its worktrees and its kusaw/ branches (kusaw/RUN and
kusaw/attempts/RUN/...) in its repositories. Without flags it applies the
factory file's retention: (max_age, max_runs); a flag replaces that bound.

Kept whatever the bounds: runs still queued, running or waiting at a gate;
runs pinned with kusaw runs pin RUN; delivered runs (merged, pushed, a pull
request); runs a kept follow-up continues. kusaw sandbox exec's and doctor's
runs go sooner: after a day, and beyond the newest 10. Each run is removed
under its own lock, so a run serve is running or resuming is left alone.
Each pass also trims the worktree pools (idle trees attempts reuse, in
<state_dir>/pool): trees of repositories no longer in the factory file,
trees idle longer than 7 days, and the oldest beyond 4 per repository. A
tree an attempt is using is never touched.
--dry-run lists what would go and changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			f, err := a.loadFactory()
			if err != nil {
				return err
			}
			p := factory.Retention{}
			if f.Retention != nil {
				p = *f.Retention
			}
			if c.Flags().Changed("older-than") {
				age, err := config.ParseAge(olderThan)
				if err != nil {
					return exitf(status.ExitUsage, "--older-than: %v", err)
				}
				p.MaxAge = age
			}
			if c.Flags().Changed("keep") {
				if keep < 1 {
					return exitf(status.ExitUsage, "--keep %d keeps no run: give 1 or more (kusaw runs pin RUN keeps one run whatever the bounds)", keep)
				}
				p.MaxRuns = keep
			}
			if p == (factory.Retention{}) {
				return exitf(status.ExitUsage, "kusaw gc needs a bound: --older-than AGE (such as 30d), --keep N, or retention: {max_age: 30d} in %s", f.Path)
			}
			st, err := a.openState()
			if err != nil {
				return err
			}
			now := time.Now()
			res, err := st.GC(p, now, dryRun)
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			if res.PoolTrees, err = st.TrimPools(f.Repos, now, dryRun); err != nil {
				return exitf(status.ExitInternal, "worktree pools: %v", err)
			}
			if jsonOut {
				b, _ := json.MarshalIndent(res, "", "  ")
				fmt.Fprintf(a.stdout, "%s\n", b)
				return nil
			}
			printGC(a.stdout, res)
			return nil
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "remove finished runs that ended longer ago than this (30d, 2w, 36h)")
	cmd.Flags().IntVar(&keep, "keep", 0, "keep the newest N finished runs (pinned, delivered and unfinished runs do not count)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed; change nothing")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print what was removed and kept as JSON")
	return cmd
}

// printGC is gc's text form: a line per run removed (or kept although a
// bound reached it), then the totals.
func printGC(w io.Writer, res *factory.GCResult) {
	verb := "removed"
	if res.DryRun {
		verb = "would remove"
	}
	branches := 0
	for _, g := range res.Removed {
		line := fmt.Sprintf("%s %s (%s, %s, ended %s): %s", verb, g.Run, termSafe(g.Pipeline), g.State, g.Ended.Local().Format("2006-01-02 15:04"), g.Why)
		if len(g.Branches) > 0 {
			line += "; branches " + strings.Join(g.Branches, ", ")
		}
		branches += len(g.Branches)
		fmt.Fprintln(w, line)
	}
	for _, g := range res.Kept {
		why := g.Why
		if g.Error != "" {
			why = "could not remove it: " + g.Error
		}
		fmt.Fprintf(w, "kept %s (%s): %s\n", g.Run, termSafe(g.Pipeline), why)
	}
	fmt.Fprintf(w, "%s %d run%s and %d branch%s; kept %d a bound reached\n", verb, len(res.Removed), plural(len(res.Removed), "s"), branches, plural(branches, "es"), len(res.Kept))
	trees := 0
	for _, t := range res.PoolTrees {
		if t.Error != "" {
			fmt.Fprintf(w, "kept pool tree %s/%s: could not remove it: %s\n", t.Pool, t.Tree, t.Error)
			continue
		}
		trees++
		line := fmt.Sprintf("%s pool tree %s/%s", verb, t.Pool, t.Tree)
		if !t.Idle.IsZero() {
			line += " (idle since " + t.Idle.Local().Format("2006-01-02 15:04") + ")"
		}
		fmt.Fprintln(w, line+": "+t.Why)
	}
	if trees > 0 {
		fmt.Fprintf(w, "%s %d idle worktree%s from the pools\n", verb, trees, plural(trees, "s"))
	}
}

func plural(n int, suffix string) string {
	if n == 1 {
		return ""
	}
	return suffix
}
