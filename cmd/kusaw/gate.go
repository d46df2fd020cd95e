package main

import (
	"errors"
	"fmt"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

func init() {
	addCommand("approve", func(a *app) *cobra.Command { return newGateCmd(a, true) })
	addCommand("reject", func(a *app) *cobra.Command { return newGateCmd(a, false) })
}

func newGateCmd(a *app, approve bool) *cobra.Command {
	var reason string
	use, short := "approve RUN [STEP]", "approve the gate a waiting run waits at (its step may be named); the run goes on"
	if !approve {
		use, short = "reject RUN [STEP] --reason TEXT", "reject the gate a waiting run waits at; the run ends failed with gate_rejected"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.RangeArgs(1, 2),
		RunE:  func(c *cobra.Command, args []string) error { return a.decideGate(approve, reason, args) },
	}
	if !approve {
		cmd.Flags().StringVar(&reason, "reason", "", "why the gate is rejected (required)")
	} else {
		cmd.Flags().StringVar(&reason, "reason", "", "a note that goes into the run's events")
	}
	return cmd
}

// localUser names the person deciding at this terminal.
func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "local"
}

// decideGate is kusaw approve and kusaw reject: the decision on the gate
// run args[0] waits at (at step args[1] when given).
func (a *app) decideGate(approve bool, reason string, args []string) error {
	if !approve && strings.TrimSpace(reason) == "" {
		return exitf(status.ExitUsage, "say why with --reason TEXT (it goes into the run's events)")
	}
	st, err := a.openStore()
	if err != nil {
		return err
	}
	r, err := loadRun(st, args[0])
	if err != nil {
		return err
	}
	d := record.GateDecision{Approve: approve, Reason: reason, By: localUser()}
	if len(args) == 2 {
		d.Step = args[1]
	}
	rec, err := st.DecideGate(r.ID, d)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) {
			return exitf(status.ExitRunFailed, "%s (fix: %s)", ae.Message, ae.Fix)
		}
		return exitf(status.ExitRunFailed, "%v", err)
	}
	verb := "rejected"
	if approve {
		verb = "approved"
	}
	step := d.Step
	if step == "" && rec.Gate != nil {
		step = rec.Gate.Step
	}
	fmt.Fprintf(a.stdout, "%s the gate before step %s of run %s\n", verb, safeFor(a.stdout, step), rec.ID)
	return nil
}
