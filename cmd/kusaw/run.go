package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand(newRunCmd) }

// KillGraceEnv overrides the time between SIGTERM and SIGKILL (tests use a
// short one).
const killGraceEnv = "KUSAW_KILL_GRACE"

func newRunCmd(a *app) *cobra.Command {
	var jsonOut bool
	var params []string
	cmd := &cobra.Command{
		Use:   "run [PIPELINE]",
		Short: "run a pipeline, through kusaw serve when it is up, else in-process (default: the pipeline called default, or the only one)",
		Long: "Runs each step of the pipeline as attempts in fresh git worktrees and records everything under\n" +
			"state_dir/runs/<run-id>/. Exit status: 0 succeeded, 1 failed, 4 a required sandbox is unavailable,\n" +
			"130 canceled (Ctrl-C or kusaw cancel).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			f, err := a.loadFactory()
			if err != nil {
				return err
			}
			opts := factory.Options{}
			if v := os.Getenv(killGraceEnv); v != "" {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return exitf(status.ExitUsage, "%s=%q is not a duration (for example 10s)", killGraceEnv, v)
				}
				opts.KillGrace = d
			}
			pipeline := ""
			if len(args) == 1 {
				pipeline = args[0]
			}
			p := newProgress(a.stdout, jsonOut)
			cfg, err := a.settings(nil)
			if err != nil {
				return err
			}
			p.color = useColor(cfg.get("color"), p.tty)
			if c, err := a.serveClient(f.StateDir); err != nil {
				return err
			} else if c != nil {
				return a.runThroughServe(c, pipeline, params, p, jsonOut)
			}
			opts.OnEvent = p.event
			e, err := factory.New(f, opts)
			if e == nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			if err != nil {
				fmt.Fprintf(a.stderr, "kusaw: warning: recovering interrupted runs: %v\n", err)
			}
			defer e.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			finished := make(chan struct{})
			defer close(finished) // runs before stop
			go func() {
				// After the first signal the run cancels gracefully; a
				// second one gets the default action and ends kusaw at
				// once (the next kusaw records the run interrupted).
				select {
				case <-finished:
					return
				case <-ctx.Done():
				}
				// ctx also ends when the command returns (stop runs after
				// finished closes): that is no signal.
				select {
				case <-finished:
					return
				default:
				}
				stop()
				if !jsonOut {
					fmt.Fprintln(a.stderr, "kusaw: canceling the run (signal again to stop at once)")
				}
			}()
			p.start()
			run, err := runWithParams(ctx, e, pipeline, params)
			p.stop()
			// Webhooks still being retried get a short while; kusaw serve
			// retries them for up to ten minutes.
			if !e.WaitNotifications(5 * time.Second) {
				fmt.Fprintln(a.stderr, "kusaw: notifications still failing after 5s are given up (run kusaw serve to retry them for 10 minutes)")
			}
			if err != nil {
				if errors.Is(err, record.ErrUnknownPipeline) || errors.Is(err, record.ErrBadParams) {
					return exitf(status.ExitUsage, "%s", strings.TrimPrefix(err.Error(), record.ErrUnknownPipeline.Error()+": "))
				}
				return exitf(status.ExitInternal, "%v", err)
			}
			if lines, n := run.EgressRefusals(); n > 0 {
				fmt.Fprintf(a.stderr, "kusaw: the egress proxy refused %d connection(s):\n", n)
				for _, l := range lines {
					fmt.Fprintf(a.stderr, "  %s\n", safeFor(a.stderr, l))
				}
				if n > len(lines) {
					fmt.Fprintf(a.stderr, "  ... and more: see each attempt's egress.log\n")
				}
			}
			atts, _ := e.State.AllAttempts(run.Record)
			return a.finishRun(run.Record, atts, jsonOut)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "stream the run's events as JSON lines")
	cmd.Flags().StringArrayVar(&params, "param", nil, "NAME=VALUE: a run parameter, KUSAW_PARAM_NAME in each step's environment (repeatable)")
	return cmd
}

// progress shows a run as it goes: a redrawn status line on a terminal,
// one line per notable event otherwise, or every event as JSON.
type progress struct {
	w        io.Writer
	json     bool
	tty      bool
	mu       sync.Mutex
	pipeline string
	step     string
	attempt  int
	of       int
	started  time.Time // the run's start
	astart   time.Time // the attempt's start
	latest   string
	drawn    bool
	color    bool // colour the outcome words (the color setting)
	done     chan struct{}
}

// useColor decides the color setting: auto means a terminal without
// NO_COLOR (no-color.org).
func useColor(setting string, tty bool) bool {
	switch setting {
	case "always":
		return true
	case "never":
		return false
	}
	return tty && os.Getenv("NO_COLOR") == ""
}

// paint colours an outcome or state word: green when it passed, red when
// it did not; plain when colour is off.
func (p *progress) paint(word any) string {
	s := fmt.Sprint(word)
	if !p.color {
		return s
	}
	switch s {
	case "passed", "succeeded":
		return "\033[32m" + s + "\033[0m"
	case "failed", "timed_out", "refused", "canceled", "interrupted", "lost":
		return "\033[31m" + s + "\033[0m"
	}
	return s
}

func newProgress(w io.Writer, jsonOut bool) *progress {
	p := &progress{w: w, json: jsonOut, done: make(chan struct{})}
	if f, ok := w.(*os.File); ok && !jsonOut {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
			p.tty = true
		}
	}
	return p
}

func (p *progress) start() {
	p.started = time.Now()
	if !p.tty {
		return
	}
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				p.redraw()
				p.mu.Unlock()
			}
		}
	}()
}

func (p *progress) stop() {
	close(p.done)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *progress) clear() {
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func (p *progress) redraw() {
	if !p.tty || p.step == "" {
		return
	}
	line := fmt.Sprintf("%s › %s  attempt %d/%d  %s (run %s)  %s", p.pipeline, p.step, p.attempt, p.of,
		fmtDur(time.Since(p.astart).Truncate(100*time.Millisecond)), fmtDur(time.Since(p.started).Truncate(100*time.Millisecond)), p.latest)
	width := 100
	if c, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && c > 20 {
		width = c - 1
	}
	if r := []rune(line); len(r) > width {
		line = string(r[:width])
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.drawn = true
}

func (p *progress) event(ev record.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	if p.tty {
		ev = safeEvent(ev)
	}
	switch ev.Type {
	case record.EvRunStarted:
		p.pipeline = fmt.Sprint(ev.Data["pipeline"])
	case record.EvAttemptStarted:
		p.step, p.attempt, p.astart = ev.Step, ev.Attempt, time.Now()
		if of, ok := ev.Int("of"); ok {
			p.of = int(of)
		}
	}
	p.latest = ev.Type + latestDetail(ev)
	line := ""
	switch ev.Type {
	case record.EvRunStarted:
		line = fmt.Sprintf("run %s: pipeline %v %v", ev.Run, ev.Data["pipeline"], ev.Data["steps"])
	case record.EvAttemptStarted:
		line = fmt.Sprintf("%s: attempt %d/%v started (sandbox %v)", ev.Step, ev.Attempt, ev.Data["of"], ev.Data["mode"])
	case record.EvAttemptFinished:
		line = fmt.Sprintf("%s: attempt %d %s in %s", ev.Step, ev.Attempt, p.paint(ev.Data["outcome"]), msDur(ev))
		if r, ok := ev.Data["reason"]; ok {
			line += fmt.Sprintf(" (%v: %v)", r, ev.Data["message"])
		}
	case record.EvStepFinished:
		line = fmt.Sprintf("%v: %v after %v attempt(s)", ev.Data["step"], ev.Data["outcome"], ev.Data["attempts"])
	case record.EvEgressBlocked:
		line = fmt.Sprintf("%s: egress blocked: %v", ev.Step, summary(ev.Data))
	case record.EvEgressWouldRefuse:
		line = fmt.Sprintf("%s: egress audit: %v:%v would be refused (kusaw egress suggest %s lists the entries)", ev.Step, ev.Data["host"], ev.Data["port"], ev.Run)
	case record.EvCancelRequested:
		line = "cancel requested"
	case record.EvGateWaiting:
		line = fmt.Sprintf("waiting at the gate before step %v: %v\n  approve from another terminal: %v\n  or reject:                     %v", ev.Data["step"], ev.Data["message"], ev.Data["approve"], ev.Data["reject"])
		if d, ok := ev.Data["deadline"]; ok {
			line += fmt.Sprintf("\n  undecided by %v, it rejects", d)
		}
	case record.EvGateApproved, record.EvGateRejected:
		line = fmt.Sprintf("gate before step %v %s by %v", ev.Data["step"], strings.TrimPrefix(ev.Type, "gate."), ev.Data["by"])
		if r, ok := ev.Data["reason"]; ok {
			line += fmt.Sprintf(": %v", r)
		}
	case record.EvGroupStarted:
		line = fmt.Sprintf("parallel group %v: %v", ev.Data["group"], ev.Data["steps"])
	case record.EvMergeConflict:
		if f, ok := ev.Data["files"]; ok && ev.Data["group"] != nil {
			line = fmt.Sprintf("parallel group %v: step %v conflicts in %v: %v", ev.Data["group"], ev.Data["step"], ev.Data["repo"], f)
		}
	case record.EvCandidatesSelected:
		line = fmt.Sprintf("%v: %v", ev.Data["step"], ev.Data["why"])
	case record.EvStepRetry:
		line = fmt.Sprintf("%v: %v", ev.Data["step"], ev.Data["why"])
	case record.EvNotifyFailed:
		if ev.Data["final"] == true {
			line = fmt.Sprintf("notification %v to %v failed: %v", ev.Data["event"], ev.Data["url"], ev.Data["error"])
		}
	}
	if line == "" {
		p.redraw()
		return
	}
	p.clear()
	if p.tty {
		fmt.Fprintf(p.w, "%s\n", line)
		p.redraw()
	} else {
		fmt.Fprintf(p.w, "%s %s\n", ev.TS.Local().Format("15:04:05"), line)
	}
}

// latestDetail is the part of an event worth a glance on the status line.
func latestDetail(ev record.Event) string {
	keys := map[string][]string{
		record.EvWorktreeCreated: {"repo"}, record.EvProcessStarted: {"pid"}, record.EvProcessExited: {"exit_code", "signal"},
		record.EvProviderTool: {"tool", "name"}, record.EvEgressBlocked: {"host", "port"}, record.EvCommitted: {"repo", "changed"},
	}[ev.Type]
	var b strings.Builder
	for _, k := range keys {
		if v, ok := ev.Data[k]; ok {
			fmt.Fprintf(&b, " %s=%v", k, v)
		}
	}
	return b.String()
}

// msDur is an event's duration_ms as a duration.
func msDur(ev record.Event) string {
	if ms, ok := ev.Int("duration_ms"); ok {
		return fmtDur(time.Duration(ms) * time.Millisecond)
	}
	return fmt.Sprint(ev.Data["duration_ms"])
}

// summary renders an event's data as a few key=value pairs.
func summary(d map[string]any) string {
	if len(d) == 0 {
		return ""
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := fmt.Sprint(d[k])
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}

// safeEvent is ev with every string it carries made safe for a terminal:
// event data can hold what a step wrote (messages, hosts, tool names).
func safeEvent(ev record.Event) record.Event {
	ev.Step = termSafe(ev.Step)
	d := make(map[string]any, len(ev.Data))
	for k, v := range ev.Data {
		d[k] = safeValue(v)
	}
	ev.Data = d
	return ev
}

func safeValue(v any) any {
	switch x := v.(type) {
	case string:
		return termSafe(x)
	case []string:
		out := make([]string, len(x))
		for i, s := range x {
			out[i] = termSafe(s)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = safeValue(s)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, s := range x {
			out[termSafe(k)] = safeValue(s)
		}
		return out
	case fmt.Stringer:
		return termSafe(x.String())
	}
	return v
}
