package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("run", newRunCmd) }

// KillGraceEnv overrides the time between SIGTERM and SIGKILL (tests use a
// short one).
const killGraceEnv = "KUSAW_KILL_GRACE"

// runFlags are kusaw run's flags.
type runFlags struct {
	json   bool
	params []string
}

func newRunCmd(a *app) *cobra.Command {
	var fl runFlags
	cmd := &cobra.Command{
		Use:   "run [PIPELINE]",
		Short: "run a pipeline, through kusaw serve when it is up, else in-process (default: the pipeline called default, or the only one)",
		Long: "Runs each step of the pipeline as attempts in fresh git worktrees and records everything under\n" +
			"state_dir/runs/<run-id>/. Exit status: 0 succeeded, 1 failed, 4 a required sandbox is unavailable,\n" +
			"130 canceled (Ctrl-C or kusaw cancel).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return a.runPipeline(fl, firstArg(args)) },
	}
	cmd.Flags().BoolVar(&fl.json, "json", false, "stream the run's events as JSON lines")
	cmd.Flags().StringArrayVar(&fl.params, "param", nil, "NAME=VALUE: a run parameter, KUSAW_PARAM_NAME in each step's environment (repeatable)")
	return cmd
}

// firstArg is args[0], or "" when there is none.
func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// runPipeline is kusaw run: one path whether kusaw serve is up or not.
// The run client starts the run here or in serve; the printer shows it;
// what a signal does, the summary and the exit code (exitCode, from the
// run's records) are followRun's, the same either way.
func (a *app) runPipeline(fl runFlags, pipeline string) error {
	f, err := a.loadFactory()
	if err != nil {
		return err
	}
	grace, err := killGrace()
	if err != nil {
		return err
	}
	cfg, err := a.settings(nil)
	if err != nil {
		return err
	}
	params, err := parseParams(fl.params)
	if err != nil {
		return exitf(status.ExitUsage, "%v", err)
	}
	out := newRunPrinter(a.stdout, a.stderr, fl.json, cfg.get("color"))
	rc, err := a.runClient(f, grace, out.Event)
	if err != nil {
		return err
	}
	defer rc.Close()
	return followRun(rc, out, pipeline, params)
}

// followRun starts the run through rc, shows it with out until it ends and
// returns its end, from which exitCode decides kusaw's status.
func followRun(rc runClient, out runPrinter, pipeline string, params map[string]string) error {
	defer cancelOnSignal(rc, out)()
	if err := rc.Start(pipeline, params); err != nil {
		return err
	}
	out.Start()
	err := rc.Wait()
	out.Stop()
	if err != nil {
		return err
	}
	rec, atts, err := rc.Result()
	if err != nil {
		return err
	}
	out.End(rec)
	return &runEnded{rec: rec, atts: atts}
}

// cancelOnSignal cancels the run on the first SIGINT or SIGTERM; a second
// one gets the default action and ends kusaw at once (the next kusaw
// records an in-process run interrupted; serve's goes on canceling). The
// function it returns stops listening.
func cancelOnSignal(rc runClient, out runPrinter) func() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	finished := make(chan struct{})
	go func() {
		select {
		case <-finished:
			return
		case <-sig:
		}
		signal.Stop(sig)
		out.Canceling()
		rc.Cancel()
	}()
	return func() {
		close(finished)
		signal.Stop(sig)
	}
}

// killGrace is KUSAW_KILL_GRACE, or 0 for the engine's default.
func killGrace() (time.Duration, error) {
	v := os.Getenv(killGraceEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, exitf(status.ExitUsage, "%s=%q is not a duration (for example 10s)", killGraceEnv, v)
	}
	return d, nil
}
