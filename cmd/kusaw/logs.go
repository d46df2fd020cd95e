package main

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand(newLogsCmd) }

func newLogsCmd(a *app) *cobra.Command {
	var step string
	var attempt int
	var follow, events, raw, seals bool
	cmd := &cobra.Command{
		Use:   "logs RUN [--step S] [--attempt N] [-f] [--events] [--raw]",
		Short: "print a run's step output (stdout.log, stderr.log), or its events with --events; -f follows a running run",
		// -f means follow here, while the root's -f is --file: the flags
		// are parsed by hand (--file FILE still works).
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, argv []string) error {
			var args []string
			for i := 0; i < len(argv); i++ {
				arg := argv[i]
				name, val, hasVal := strings.Cut(arg, "=")
				next := func() (string, error) {
					if hasVal {
						return val, nil
					}
					if i+1 >= len(argv) {
						return "", exitf(status.ExitUsage, "%s needs a value (see 'kusaw logs --help')", name)
					}
					i++
					return argv[i], nil
				}
				switch name {
				case "-h", "--help":
					return c.Help()
				case "-f", "--follow":
					follow = true
				case "--events":
					events = true
				case "--raw":
					raw = true
				case "--seals":
					seals = true
				case "--step":
					v, err := next()
					if err != nil {
						return err
					}
					step = v
				case "--attempt":
					v, err := next()
					if err != nil {
						return err
					}
					n, err := strconv.Atoi(v)
					if err != nil || n < 1 {
						return exitf(status.ExitUsage, "--attempt %q is not an attempt number (1, 2, ...)", v)
					}
					attempt = n
				case "--file":
					v, err := next()
					if err != nil {
						return err
					}
					a.file = v
				default:
					if strings.HasPrefix(arg, "-") {
						return exitf(status.ExitUsage, "unknown flag %s (see 'kusaw logs --help')", arg)
					}
					args = append(args, arg)
				}
			}
			if len(args) != 1 {
				return exitf(status.ExitUsage, "kusaw logs takes one run id (list them with: kusaw runs)")
			}
			st, err := a.openStore()
			if err != nil {
				return err
			}
			r, err := loadRun(st, args[0])
			if err != nil {
				return err
			}
			if step != "" {
				found := false
				for _, s := range r.Steps {
					found = found || s.ID == step
				}
				// A helper's step (a fixer, a judge, a resolve) has logs
				// too.
				helpers, _ := st.Helpers(r)
				for _, h := range helpers {
					found = found || h.Step == step
				}
				if !found {
					return exitf(status.ExitNotFound, "run %s has no step %q", r.ID, step)
				}
			}
			// A step's output reaches a terminal with its control
			// characters made visible, unless --raw asks for the bytes.
			out := a.stdout
			if !raw {
				out = forTerminal(out)
				defer flushSafe(out)
			}
			l := &logPrinter{w: out, offsets: map[string]int64{}, headed: map[string]bool{}, st: st, run: r.ID, hideSeals: events && !seals}
			for {
				if events {
					l.copy(filepath.Join(st.RunDir(r.ID), "events.jsonl"), "")
				}
				own, _ := st.Attempts(r)
				helpers, _ := st.Helpers(r)
				atts := runOrder(r, own, helpers)
				matched := false
				for _, at := range atts {
					if (step != "" && at.Step != step) || (attempt > 0 && at.Number != attempt) {
						continue
					}
					matched = true
					dir := st.AttemptDir(r.ID, at.Step, at.Number)
					head := fmt.Sprintf("== %s attempt %d", at.Step, at.Number)
					if at.Role != nil || !inRun(r, at.Step) {
						head += " (" + helperLabel(at) + ")"
					}
					if events {
						l.copy(filepath.Join(dir, "events.jsonl"), head+" events ==")
						continue
					}
					for _, p := range at.Processes {
						l.copy(filepath.Join(dir, "setup.log"), head+" setup ==")
						l.copy(filepath.Join(dir, p.Stdout), head+" "+p.Stdout+" ==")
						l.copy(filepath.Join(dir, p.Stderr), head+" "+p.Stderr+" ==")
					}
				}
				if !follow {
					if !matched && attempt > 0 {
						return exitf(status.ExitNotFound, "run %s has no attempt %d%s", r.ID, attempt, stepSuffix(step))
					}
					return nil
				}
				if r.State.Final() {
					return nil
				}
				time.Sleep(200 * time.Millisecond)
				if st, err = a.openStore(); err != nil {
					return err
				}
				cur, err := st.LoadRun(r.ID)
				if err != nil {
					return exitf(status.ExitInternal, "%v", err)
				}
				r = cur
			}
		},
	}
	cmd.SetHelpTemplate(`Usage: kusaw logs RUN [--step S] [--attempt N] [-f|--follow] [--events [--seals]] [--raw] [--file FACTORY]

Prints the output of a run's attempts (setup.log, stdout.log, stderr.log), each
file under a header; the attempts of the helpers the pipeline's shapes ran (a
fixer, a judge, a resolve step) too, after the attempt they served, their
header naming their role. --step and --attempt narrow it; -f keeps printing new
output until the run ends; --events prints the events files instead, without
the chain's seal lines unless --seals asks for them. On a
terminal, control characters a step wrote (escape sequences) are shown as
^[ and the like; --raw prints the bytes as they are.
`)
	return cmd
}

// inRun reports whether step is one of the run's pipeline steps.
func inRun(r *record.RunRecord, step string) bool {
	for _, s := range r.Steps {
		if s.ID == step {
			return true
		}
	}
	return false
}

func stepSuffix(step string) string {
	if step == "" {
		return ""
	}
	return " of step " + step
}

// logPrinter prints new bytes of files, once each, with a header before a
// file's first bytes.
type logPrinter struct {
	w       io.Writer
	offsets map[string]int64
	headed  map[string]bool
	st      RunStore // reads the files itself, or through serve
	run     string
	// hideSeals leaves out the chain's seal lines (kusaw log verify
	// checks them; a reader wants the events): whole lines only, so a
	// line still being written waits for its end.
	hideSeals bool
}

func (l *logPrinter) copy(path, head string) {
	rel, err := filepath.Rel(l.st.RunDir(l.run), path)
	if err != nil {
		return
	}
	for {
		buf, err := l.st.ReadLog(l.run, filepath.ToSlash(rel), l.offsets[path], 64<<10)
		n := len(buf)
		show := buf
		if l.hideSeals && n > 0 {
			end := bytes.LastIndexByte(buf, '\n') + 1
			if end == 0 && n < 64<<10 {
				return // not one whole line yet
			}
			if end == 0 {
				end = n // a line longer than a read: shown as it comes
			}
			n, show = end, nil
			for _, line := range bytes.SplitAfter(buf[:end], []byte("\n")) {
				if len(line) > 0 && !chainlog.IsSeal(line) {
					show = append(show, line...)
				}
			}
		}
		if n > 0 {
			if len(show) > 0 {
				if !l.headed[path] && head != "" {
					fmt.Fprintln(l.w, head)
				}
				l.headed[path] = true
				l.w.Write(show)
			}
			l.offsets[path] += int64(n)
		}
		if err != nil || n == 0 {
			return
		}
	}
}
