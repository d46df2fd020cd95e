package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// exitCode is kusaw's exit status for what a command returned: the one
// place it is decided (restic's ComputeExitCode), called once in run.
// Errors carry their identity, never matched by their text: an exitError
// its documented code, a finished run its records (record.RunExitCode
// reads them the same in-process and through serve), sandbox exec's
// attempt its record (record.AttemptExitCode: the command's own status),
// anything else is a failure.
func exitCode(err error) status.ExitCode {
	var (
		ee  *exitError
		end *runEnded
		att *attemptEnded
	)
	switch {
	case err == nil:
		return status.ExitOK
	case errors.As(err, &end):
		return record.RunExitCode(end.rec, end.atts)
	case errors.As(err, &att):
		return record.AttemptExitCode(att.rec)
	case errors.As(err, &ee):
		return ee.code
	}
	return status.ExitRunFailed
}

// runEnded is a command's result when it ran or followed a run to its
// end, whatever the end (kusaw run): exitCode decides from its records.
// It has printed what it had to say.
type runEnded struct {
	rec  *record.RunRecord
	atts []*record.AttemptRecord // the pipeline's attempts and the helpers'
}

func (e *runEnded) Error() string { return "" }

// attemptEnded is sandbox exec's result: its one attempt ended, whatever
// the end, and what it had to say is printed.
type attemptEnded struct{ rec *record.AttemptRecord }

func (e *attemptEnded) Error() string { return "" }

// usageArgs gives every command's argument check its identity: a usage
// error (exit 2) naming the command's help, as flag errors have through
// cobra's FlagErrorFunc. A command without its own check gets cobra's:
// only the root refuses arguments, as an unknown command.
func usageArgs(c *cobra.Command) {
	check := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		var err error
		switch {
		case check != nil:
			err = check(cmd, args)
		case !cmd.HasParent() && cmd.HasSubCommands() && len(args) > 0:
			err = fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2 // cobra's default
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				err = fmt.Errorf("%v: did you mean %s?", err, strings.Join(s, ", "))
			}
		}
		if err != nil {
			return exitf(status.ExitUsage, "%v (see '%s --help')", err, cmd.CommandPath())
		}
		return nil
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}
