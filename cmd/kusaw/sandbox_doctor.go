package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { sandboxSubcommands = append(sandboxSubcommands, newSandboxDoctorCmd) }

func newSandboxDoctorCmd(a *app) *cobra.Command {
	var step string
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor [--step ID] [--json]",
		Short: "per step: effective mode, allowlist with origins, injected names, proxy socket, plan, capabilities, W1, and probes P1–P8",
		Long: `For each step (or the one --step names): the effective sandbox mode and
where it comes from (per attempt process with per_repo), the network, the
allowlist with each host's origin, the env names inject sets (never values),
where the proxy socket of an attempt lives, the sandbox plan, the provider's
capability matrix for agent steps, and W1: the known tools that ignore
HTTP(S)_PROXY and fail closed under an allowlist.

Then the probes: P1 the backend binary is trusted, P2 its namespaces work,
and for real inside the step's sandbox (a one-attempt run recorded under
state_dir/runs/, like kusaw sandbox exec): P3 a write outside the writable
paths fails, P4 the home's secrets are hidden, P5 an allowed host is reached
through the proxy, P6 a host not allowed is refused with 403 and logged in
egress.log, P7 a direct connection that bypasses the proxy (to a host port
no entry lists) fails, P8 local-service ports (doctor's own, and the step's
where something listens on the host) are reached straight from the
sandbox's localhost. The probe
run always uses network: allowlist and allows doctor's own loopback server
(origin doctor); a step whose network is open is told so.

Exit status: 0 when every probe that ran passed, 4 when the sandbox backend
is unavailable, 1 when a probe failed (each failure prints its fix).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return a.doctor(step, newPrinter(a.stdout, asJSON, factory.WriteDoctorText))
		},
	}
	c.Flags().StringVar(&step, "step", "", "report and probe only this step")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}

// doctor is kusaw sandbox doctor: the report of each step (or one) with
// its probes, printed; the exit code is the report's.
func (a *app) doctor(step string, p printer[*factory.DoctorReport]) error {
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
	rep, err := e.Doctor(ctx, factory.DoctorOptions{Step: step})
	if err != nil {
		if errors.Is(err, record.ErrUnknownStep) {
			return exitf(status.ExitUsage, "%v", err)
		}
		return exitf(status.ExitInternal, "%v", err)
	}
	p.Print(rep)
	return silentExit(status.ExitCode(rep.ExitCode))
}
