package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("deliver", newDeliverCmd) }

func newDeliverCmd(a *app) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "deliver RUN",
		Short: "deliver a succeeded run again: merge, push and pull request as its pipeline's deliver says (each step is idempotent)",
		Long: `Does the deliver of a succeeded run's pipeline again, outside every
sandbox, with your own git credentials: merge the run branch into a local
branch, push it, and open or update its pull request. A merge already done
or a pull request already open is found and kept up to date, so it is safe
to run again after fixing what made a delivery fail. The run's state never
changes; the outcome is recorded in run.json (delivery) and its events.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.deliver(args[0], newPrinter(a.stdout, jsonOut, printDelivery))
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the delivery record as JSON")
	return cmd
}

// deliver is kusaw deliver: the run's delivery done again, its record
// printed; exit 9 when a step of it failed.
func (a *app) deliver(id string, p printer[*record.Delivery]) error {
	f, err := a.loadFactory()
	if err != nil {
		return err
	}
	e, err := factory.New(f, factory.Options{})
	if e == nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	defer e.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := e.Deliver(ctx, id)
	if errors.Is(err, record.ErrNoRun) {
		return exitf(status.ExitNotFound, "%v", err)
	}
	if err != nil {
		return exitf(status.ExitUsage, "%v", err)
	}
	p.Print(d)
	if d.State != record.DeliveryDone {
		return exitf(status.ExitDeliverFailed, "delivery failed at %s: %s (fix: %s)", d.Failed, d.Message, d.Fix)
	}
	return nil
}

// printDelivery is kusaw deliver's text: what was merged, pushed, opened.
func printDelivery(w io.Writer, d *record.Delivery) {
	if d.Merged != "" {
		fmt.Fprintf(w, "merged into %s: %s\n", d.Into, short(d.Merged))
	}
	if d.Pushed != "" {
		fmt.Fprintf(w, "pushed: %s\n", d.Pushed)
	}
	if d.PullURL != "" {
		// The URL is the forge's answer: any text at all.
		fmt.Fprintf(w, "pull request: %s\n", safeFor(w, d.PullURL))
	}
}
