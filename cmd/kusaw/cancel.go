package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("cancel", newCancelCmd) }

func newCancelCmd(a *app) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "cancel a running run: its process gets SIGTERM, then SIGKILL after the grace period; the run ends canceled",
		Args:  cobra.ExactArgs(1),
		RunE:  func(c *cobra.Command, args []string) error { return a.cancel(args[0], wait) },
	}
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "wait this long for the run to end (0: do not wait)")
	return cmd
}

// cancel is kusaw cancel: the run is asked to stop, and with wait its end
// is waited for.
func (a *app) cancel(id string, wait time.Duration) error {
	st, err := a.openStore()
	if err != nil {
		return err
	}
	r, err := loadRun(st, id)
	if err != nil {
		return err
	}
	if r.State.Final() {
		return exitf(status.ExitRunFailed, "run %s already ended (%s)", r.ID, r.State)
	}
	if _, err := st.RequestCancel(r.ID); err != nil {
		return exitf(status.ExitRunFailed, "%v", err)
	}
	fmt.Fprintf(a.stdout, "cancel requested for run %s\n", r.ID)
	if wait <= 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		// Reopening recovers the run if its owner died meanwhile.
		st, err = a.openStore()
		if err != nil {
			return err
		}
		cur, err := st.LoadRun(r.ID)
		if err == nil && cur.State.Final() {
			fmt.Fprintf(a.stdout, "run %s %s\n", cur.ID, cur.State)
			return nil
		}
	}
	return exitf(status.ExitRunFailed, "run %s has not ended after %s; its owner may be stuck in a step's grace period", r.ID, wait)
}
