package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("logs", newLogsCmd) }

func newLogsCmd(a *app) *cobra.Command {
	var step string
	var attempt int
	var follow, events, raw, seals, transcript, jsonOut bool
	cmd := &cobra.Command{
		Use:   "logs RUN [--step S] [--attempt N] [-f] [--events] [--raw | --transcript | --json]",
		Short: "print a run's step output (an agent's as a transcript on a terminal: docs/logs.md), or its events with --events; -f follows a running run",
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
				case "--transcript":
					transcript = true
				case "--json":
					jsonOut = true
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
			if raw && (transcript || jsonOut) {
				return exitf(status.ExitUsage, "--raw prints the bytes as written; --transcript and --json print the agent's transcript: give one of them")
			}
			l := &logPrinter{w: out, offsets: map[string]int64{}, headed: map[string]bool{}, st: st, run: r.ID, hideSeals: events && !seals,
				transcripts: map[string]*transcriptState{}, follow: follow, onlyTranscripts: jsonOut}
			// An agent's stream-json is for programs: a reader at a
			// terminal gets its transcript, a pipe the bytes (scripts and
			// jq read the stream) unless --transcript or --json asks.
			if !raw && !events && (transcript || jsonOut || isTerminal(a.stdout)) {
				l.tp = &textTranscript{w: out}
				if jsonOut {
					l.tp = &jsonTranscript{w: a.stdout}
				}
			}
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
					if l.tp != nil && at.Kind == config.KindAgent {
						l.agent(at, dir, head)
						continue
					}
					if l.onlyTranscripts {
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
	cmd.SetHelpTemplate(`Usage: kusaw logs RUN [--step S] [--attempt N] [-f|--follow] [--events [--seals]] [--raw | --transcript | --json] [--file FACTORY]

Prints the output of a run's attempts (setup.log, stdout.log, stderr.log), each
file under a header; the attempts of the helpers the pipeline's shapes ran (a
fixer, a judge, a resolve step) too, after the attempt they served, their
header naming their role. --step and --attempt narrow it; -f keeps printing new
output until the run ends; --events prints the events files instead, without
the chain's seal lines unless --seals asks for them. On a
terminal, control characters a step wrote (escape sequences) are shown as
^[ and the like; --raw prints the bytes as they are.

An agent step's stdout.log is its CLI's event stream (Claude Code's
stream-json, Codex's and Gemini's JSON events). On a terminal kusaw logs
shows it as a transcript instead: a line per tool call with its name and
one argument, its result shortened under it, the agent's text, the final
message in full and the attempt's usage last. Piped into a file or a
program it prints the stream's bytes, unless --transcript asks for the
transcript there too; --json prints the transcript as JSON lines (one per
entry, a last one of kind usage; other steps' output is left out); --raw
prints the bytes on a terminal.
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
	// tp prints agent attempts as transcripts (nil: their bytes);
	// onlyTranscripts leaves the other attempts' output out (--json).
	tp              transcriptPrinter
	transcripts     map[string]*transcriptState
	follow          bool
	onlyTranscripts bool
}

// transcriptState is how far an agent attempt's transcript is printed.
type transcriptState struct {
	events  []byte // the events file read so far
	printed int    // entries printed
	headed  bool
	ended   bool
}

// agent prints an agent attempt: its setup log, its transcript so far,
// and its stderr. Following a running attempt, a tool call waits for its
// result before it is printed, so a call and its result stay together.
func (l *logPrinter) agent(at *record.AttemptRecord, dir, head string) {
	l.copy(filepath.Join(dir, record.SetupLogFile), head+" setup ==")
	ts := l.transcripts[dir]
	if ts == nil {
		ts = &transcriptState{}
		l.transcripts[dir] = ts
	}
	if !ts.ended {
		ts.events = append(ts.events, l.readNew(filepath.Join(dir, record.EventsFile))...)
		t := record.BuildTranscript(bytes.NewReader(ts.events))
		done := at.Finished != nil
		th := head + " transcript (" + at.Provider + ") =="
		for ts.printed < len(t.Entries) {
			e := t.Entries[ts.printed]
			if l.follow && !done && e.Kind == "tool" && e.Tool != nil && !e.Tool.Done {
				break
			}
			if !ts.headed {
				l.tp.Head(at, th)
				ts.headed = true
			}
			final := ""
			if e.Kind == "result" && e.Data["truncated"] == true && at.Provider == "claude-code" && len(at.Processes) > 0 {
				final = claudeFinal(l.readAll(filepath.Join(dir, at.Processes[0].Stdout)))
			}
			l.tp.Entry(at, e, final)
			ts.printed++
		}
		if done {
			if !ts.headed {
				l.tp.Head(at, th)
				ts.headed = true
			}
			u := at.Usage
			if u == nil && t.Usage != nil {
				// The last running total the stream reported.
				b, _ := json.Marshal(t.Usage)
				u = &record.Usage{}
				if json.Unmarshal(b, u) != nil {
					u = nil
				}
			}
			l.tp.End(at, u)
			ts.ended = true
		}
	}
	if l.onlyTranscripts {
		return
	}
	for _, p := range at.Processes {
		l.copy(filepath.Join(dir, p.Stderr), head+" "+p.Stderr+" ==")
	}
}

// readNew returns a file's bytes not read before (through the store: the
// files themselves, or serve).
func (l *logPrinter) readNew(path string) []byte {
	rel, err := filepath.Rel(l.st.RunDir(l.run), path)
	if err != nil {
		return nil
	}
	var out []byte
	for {
		buf, err := l.st.ReadLog(l.run, filepath.ToSlash(rel), l.offsets[path], 64<<10)
		out = append(out, buf...)
		l.offsets[path] += int64(len(buf))
		if err != nil || len(buf) == 0 {
			return out
		}
	}
}

// readAll returns a whole file, apart from what readNew has read.
func (l *logPrinter) readAll(path string) []byte {
	rel, err := filepath.Rel(l.st.RunDir(l.run), path)
	if err != nil {
		return nil
	}
	var out []byte
	for off := int64(0); ; {
		buf, err := l.st.ReadLog(l.run, filepath.ToSlash(rel), off, 1<<20)
		out = append(out, buf...)
		off += int64(len(buf))
		if err != nil || len(buf) == 0 {
			return out
		}
	}
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
