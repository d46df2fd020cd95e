package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
)

// app carries what every command needs; its streams are swappable so tests
// can run commands in-process.
type app struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	file   string    // -f/--file
	cfg    *settings // kusaw's own settings, loaded on first use
}

// exitError makes a command end with a documented exit code. Its message is
// printed as one line on stderr unless it is empty.
type exitError struct {
	code status.ExitCode
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitf(code status.ExitCode, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// silentExit ends the command with code after it printed its own output.
func silentExit(code status.ExitCode) error { return &exitError{code: code} }

// commandFactories is filled by each command file's init, so adding a
// command never edits this file. Each goes by its command's name, so that
// a start can make only the command it runs (newRootCmdFor).
var commandFactories []commandFactory

type commandFactory struct {
	name string
	make func(*app) *cobra.Command
}

func addCommand(name string, f func(*app) *cobra.Command) {
	commandFactories = append(commandFactories, commandFactory{name, f})
}

// newRootCmd is the whole command tree.
func newRootCmd(a *app) *cobra.Command { return newRootCmdOf(a, "") }

// newRootCmdFor is the tree that runs args: the root with only the command
// args name first, when they start with one (kusaw sandbox exec makes one
// command of 29 and their flags, not all: docs/benchmarks.md, "Lean
// start, seventh pass (issue 25)"), else the whole tree (help,
// completion, a flag first, a mistyped name and its suggestions).
func newRootCmdFor(a *app, args []string) *cobra.Command {
	if len(args) > 0 {
		for _, f := range commandFactories {
			if f.name == args[0] {
				return newRootCmdOf(a, f.name)
			}
		}
	}
	return newRootCmd(a)
}

// newRootCmdOf is the root with every command, or only the one named only.
func newRootCmdOf(a *app, only string) *cobra.Command {
	root := &cobra.Command{
		Use:           "kusaw",
		Short:         "kusaw runs a software factory's steps in git worktrees, optionally sandboxed",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.PersistentFlags().StringVarP(&a.file, "file", "f", "", "factory file (default: ./factory.yaml, then $KUSAW_CONFIG)")
	// --version is kusaw version; the root runs only for it, and without
	// it prints help as a root without RunE would.
	var showVersion, versionJSON bool
	root.Flags().BoolVar(&showVersion, "version", false, "print the version (as kusaw version)")
	root.Flags().BoolVar(&versionJSON, "json", false, "with --version: print it as JSON")
	root.RunE = func(c *cobra.Command, args []string) error {
		if !showVersion {
			return c.Help()
		}
		printVersion(a.stdout, versionJSON)
		return nil
	}
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if c.Hidden {
			// The helpers kusaw runs inside a sandbox read no settings.
			return nil
		}
		cfg, err := a.settings(nil)
		if err != nil {
			return err
		}
		sandbox.CheckCacheFile = cfg.get("probe_cache")
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// CommandPath already starts with the program's name.
		return exitf(status.ExitUsage, "%v (see '%s --help')", err, c.CommandPath())
	})
	for _, f := range commandFactories {
		if only == "" || f.name == only {
			root.AddCommand(f.make(a))
		}
	}
	// cobra would add these at Execute, after usageArgs. The completion
	// command and its four shells' help texts are half of a small tree's
	// making (0.4 ms at a loaded start); kusaw completion has a tree of
	// its own (only is "" for it).
	root.CompletionOptions.DisableDefaultCmd = only != ""
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	usageArgs(root)
	return root
}

// run executes the CLI and returns the process exit code. It never lets a
// panic escape as a stack trace.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "kusaw: internal error: %v (please report this)\n", r)
			code = int(status.ExitInternal)
		}
	}()
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRootCmdFor(a, args)
	root.SetArgs(args)
	err := root.Execute()
	if msg := errMessage(err); msg != "" {
		// A failed run's message can quote what its step wrote.
		if isTerminal(stderr) {
			msg = termSafe(msg)
		}
		fmt.Fprintf(stderr, "kusaw: %s\n", msg)
	}
	return int(exitCode(err))
}

// errMessage is the line kusaw prints for what a command returned: an
// exitError's message (none when the command printed its own), nothing
// for a run's or sandbox exec's end (printed already), else the error's
// first line.
func errMessage(err error) string {
	var (
		ee  *exitError
		end *runEnded
		att *attemptEnded
	)
	switch {
	case err == nil, errors.As(err, &end), errors.As(err, &att):
		return ""
	case errors.As(err, &ee):
		return ee.msg
	}
	return firstLine(err.Error())
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
