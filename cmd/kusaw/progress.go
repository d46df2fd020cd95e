package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// runPrinter shows a run as kusaw run follows it: its events as they come,
// then its end. kusaw run's logic calls it and never prints itself; there
// are two, textProgress and jsonProgress (--json), and the lines on stderr
// (the refusal summary, why the run failed) are the same for both.
type runPrinter interface {
	Start()             // the run is under way
	Event(record.Event) // each of the run's events, once
	Stop()              // the run ended: a status line is cleared
	Canceling()         // the first signal: the run is being canceled
	End(*record.RunRecord)
}

func newRunPrinter(stdout, stderr io.Writer, jsonOut bool, color string) runPrinter {
	if jsonOut {
		return &jsonProgress{w: stdout, stderr: stderr}
	}
	p := newProgress(stdout)
	p.stderr = stderr
	p.color = useColor(color, p.tty)
	return p
}

// jsonProgress prints every event as a JSON line on stdout.
type jsonProgress struct {
	mu     sync.Mutex
	w      io.Writer
	stderr io.Writer
}

func (p *jsonProgress) Start()     {}
func (p *jsonProgress) Stop()      {}
func (p *jsonProgress) Canceling() {}

func (p *jsonProgress) Event(ev record.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := json.Marshal(ev)
	fmt.Fprintf(p.w, "%s\n", b)
}

// End leaves stdout to the events: the run's end is its last ones.
func (p *jsonProgress) End(rec *record.RunRecord) {
	printRefusals(p.stderr, rec)
	printRunFailure(p.stderr, rec)
}

// textProgress shows a run as it goes: a redrawn status line on a
// terminal, one line per notable event otherwise.
type textProgress struct {
	w        io.Writer
	stderr   io.Writer
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

func newProgress(w io.Writer) *textProgress {
	p := &textProgress{w: w, stderr: io.Discard, done: make(chan struct{})}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
			p.tty = true
		}
	}
	return p
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
func (p *textProgress) paint(word any) string {
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

func (p *textProgress) Canceling() {
	fmt.Fprintln(p.stderr, "kusaw: canceling the run (signal again to stop at once)")
}

// End prints the run's outcome, its branches and what it cost on stdout.
func (p *textProgress) End(rec *record.RunRecord) {
	printRefusals(p.stderr, rec)
	fmt.Fprintf(p.w, "run %s %s in %s\n", rec.ID, rec.State, runDuration(rec))
	for _, rr := range rec.Repos {
		fmt.Fprintf(p.w, "  %s: %s at %s\n", rr.Name, rr.Branch, short(rr.HeadSHA))
	}
	// What the agents cost, when any reported it (kusaw usage sums runs).
	if rec.Usage != nil {
		fmt.Fprintf(p.w, "  usage: %s\n", usageLine(rec.Usage))
	}
	printRunFailure(p.stderr, rec)
}

// printRefusals lists the hosts the egress proxy refused during the run
// (the first 20 the run's record names) and how many refusals there were.
func printRefusals(w io.Writer, rec *record.RunRecord) {
	n := rec.EgressBlocked
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "kusaw: the egress proxy refused %d connection(s):\n", n)
	for _, l := range rec.EgressRefused {
		fmt.Fprintf(w, "  %s\n", safeFor(w, l))
	}
	if n > len(rec.EgressRefused) {
		fmt.Fprintf(w, "  ... and more: see each attempt's egress.log\n")
	}
}

// printRunFailure says why a run that did not succeed ended, and the fix.
func printRunFailure(w io.Writer, rec *record.RunRecord) {
	if rec.State == status.RunSucceeded || rec.Message == "" {
		return
	}
	fix := ""
	if rec.Fix != "" {
		fix = " (fix: " + rec.Fix + ")"
	}
	fmt.Fprintf(w, "kusaw: %s: %s%s\n", rec.Reason, safeFor(w, rec.Message), fix)
}

func (p *textProgress) Start() {
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

func (p *textProgress) Stop() {
	close(p.done)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *textProgress) clear() {
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func (p *textProgress) redraw() {
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

func (p *textProgress) Event(ev record.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
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
		line = egressBlockedLine(ev)
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
