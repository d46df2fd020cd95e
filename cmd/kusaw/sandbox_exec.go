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
	"github.com/kusaw/kusaw/sandbox/adhoc"
	"github.com/kusaw/kusaw/status"
)

func init() { sandboxSubcommands = append(sandboxSubcommands, newSandboxExecCmd) }

func newSandboxExecCmd(a *app) *cobra.Command {
	var step string
	c := &cobra.Command{
		Use:   "exec [--step ID] -- CMD [ARG...]",
		Short: "run one command under a step's sandbox and proxy (or the factory's), streaming its output",
		Long: `Runs CMD as a one-attempt run of the step: in fresh worktrees of the step's
repos, under the step's sandbox plan and egress allowlist, recorded like any
attempt under state_dir/runs/. It is always sandboxed, even when the step's
own mode is off. Without --step it uses the factory's sandbox policy over
every repo. With no factory file at all, CMD runs with the current folder
writable, no network, and the home hidden.

Exits with CMD's own exit status (128+n when a signal ended it), 4 when the
sandbox cannot run here.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return a.sandboxExec(step, args, c.ArgsLenAtDash()) },
	}
	c.Flags().StringVar(&step, "step", "", "the step whose sandbox and allowlist to use (default: the factory's)")
	return c
}

// sandboxExec is kusaw sandbox exec: argv as a one-attempt run of the
// step (or under the default policy without a factory file); dash is
// where -- stood among the arguments.
func (a *app) sandboxExec(step string, argv []string, dash int) error {
	if dash != 0 {
		return exitf(status.ExitUsage, "put the command after --: kusaw sandbox exec [--step ID] -- CMD [ARG...]")
	}
	if _, err := a.factoryPath(); err != nil {
		if step != "" {
			return err
		}
		code, err := adhoc.Exec(context.Background(), adhoc.Request{Argv: argv, Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr})
		if err != nil {
			return exitf(status.ExitCode(code), "%v", err)
		}
		return silentExit(status.ExitCode(code))
	}
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
	res, err := e.Exec(ctx, factory.ExecRequest{Step: step, Argv: argv, Stdout: a.stdout, Stderr: a.stderr})
	if err != nil {
		if errors.Is(err, record.ErrUnknownStep) {
			return exitf(status.ExitUsage, "%v", err)
		}
		if res == nil {
			return exitf(status.ExitInternal, "%v", err)
		}
	}
	if res.Forced {
		fmt.Fprintf(a.stderr, "kusaw: note: step %s's sandbox mode is off; sandbox exec ran it sandboxed anyway\n", step)
	}
	printExecEnd(a.stderr, res)
	if res.Attempt == nil {
		return exitf(status.ExitInternal, "%v", err) // its attempt.json could not be read
	}
	return &attemptEnded{res.Attempt}
}

// printExecEnd is what sandbox exec says after the command: the hosts
// the proxy refused, and why the attempt failed when it was not the
// command's own exit status.
func printExecEnd(w io.Writer, res *factory.ExecResult) {
	// The summary names hosts and messages that came from the command:
	// safe for a terminal.
	w = forTerminal(w)
	defer flushSafe(w)
	if lines, n := res.Run.EgressRefusals(); n > 0 {
		fmt.Fprintf(w, "kusaw: the egress proxy refused %d connection(s):\n", n)
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	at := res.Attempt
	switch {
	case at == nil:
	case at.Outcome == status.OutcomeRefused:
		fmt.Fprintf(w, "kusaw: %s: %s (fix: %s)\n", at.Reason, at.Message, at.Fix)
	case at.Outcome != status.OutcomePassed && at.Reason != status.ReasonStepExitNonzero && at.Message != "":
		fmt.Fprintf(w, "kusaw: %s: %s\n", at.Reason, at.Message)
	}
}
