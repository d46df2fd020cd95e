package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/spf13/cobra"
)

func init() { addCommand("show", newShowCmd) }

func newShowCmd(a *app) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "show a run: its steps, attempts, outcomes, reasons, durations and branches",
		Args:  cobra.ExactArgs(1),
		RunE:  func(c *cobra.Command, args []string) error { return a.show(args[0], newShowPrinter(a.stdout, jsonOut)) },
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the run, its attempts and its helpers' attempts as JSON")
	return cmd
}

// runView is what kusaw show prints: a run, its folder, the attempts of
// its pipeline's steps and those of its helpers (fixers, judges, resolves).
type runView struct {
	Run      *record.RunRecord
	Dir      string
	Attempts []*record.AttemptRecord
	Helpers  []*record.AttemptRecord
}

// show reads a run, through serve when it is up, and prints it.
func (a *app) show(id string, p showPrinter) error {
	st, err := a.openStore()
	if err != nil {
		return err
	}
	r, err := loadRun(st, id)
	if err != nil {
		return err
	}
	v := &runView{Run: r, Dir: st.RunDir(r.ID)}
	v.Attempts, _ = st.Attempts(r)
	v.Helpers, _ = st.Helpers(r)
	p.Show(v)
	return nil
}

// showPrinter prints kusaw show's run: showText, or showJSON (--json).
type showPrinter interface{ Show(*runView) }

func newShowPrinter(w io.Writer, jsonOut bool) showPrinter {
	if jsonOut {
		return showJSON{w}
	}
	return showText{w}
}

// showJSON is {"run", "attempts", "helpers"}: helpers is a key of its
// own, so "attempts" stays the pipeline's steps' attempts, as before.
type showJSON struct{ w io.Writer }

func (p showJSON) Show(v *runView) {
	helpers := v.Helpers
	if helpers == nil {
		helpers = []*record.AttemptRecord{}
	}
	b, _ := json.MarshalIndent(map[string]any{"run": v.Run, "attempts": v.Attempts, "helpers": helpers}, "", "  ")
	fmt.Fprintf(p.w, "%s\n", b)
}

// showText is the run's header, then each step with its attempts, each
// helper's attempt at its place (placeHelpers).
type showText struct{ w io.Writer }

func (p showText) Show(v *runView) {
	// Messages, argv and names may come from a step: control characters
	// are made visible on a terminal.
	w := forTerminal(p.w)
	defer flushSafe(w)
	showHeader(w, v)
	showSteps(w, v)
}

// showHeader is the run's own lines: state, reason, folder, usage, repos,
// delivery and the gate it waits at.
func showHeader(w io.Writer, v *runView) {
	r := v.Run
	fmt.Fprintf(w, "run %s  pipeline %s  %s  %s\n", r.ID, r.Pipeline, r.State, runDuration(r))
	if r.Reason != "" {
		fmt.Fprintf(w, "  reason: %s: %s\n", r.Reason, r.Message)
		if r.Fix != "" {
			fmt.Fprintf(w, "  fix: %s\n", r.Fix)
		}
	}
	if r.Owner != nil {
		fmt.Fprintf(w, "  owner: pid %d\n", r.Owner.PID)
	}
	fmt.Fprintf(w, "  folder: %s\n", v.Dir)
	if r.Usage != nil {
		fmt.Fprintf(w, "  usage: %s\n", usageLine(r.Usage))
	}
	for _, rr := range r.Repos {
		fmt.Fprintf(w, "  repo %s: %s %s → %s (base %s)\n", rr.Name, rr.Branch, short(rr.BaseSHA), short(rr.HeadSHA), orDash(rr.Base))
	}
	if d := r.Delivery; d != nil {
		fmt.Fprintf(w, "  delivery (%s): %s", d.Repo, d.State)
		if d.Merged != "" {
			fmt.Fprintf(w, ", merged into %s at %s", d.Into, short(d.Merged))
		}
		if d.Pushed != "" {
			fmt.Fprintf(w, ", pushed to %s", d.Pushed)
		}
		if d.PullURL != "" {
			fmt.Fprintf(w, ", pull request %s", d.PullURL)
		}
		fmt.Fprintln(w)
		if d.State != record.DeliveryDone {
			fmt.Fprintf(w, "    %s failed: %s\n    fix: %s\n", d.Failed, d.Message, d.Fix)
		}
	}
	if g := r.Gate; g != nil && r.State == status.RunWaiting {
		fmt.Fprintf(w, "  waiting at the gate before step %s: %s\n    approve: kusaw approve %s %s\n    reject:  kusaw reject %s %s --reason TEXT\n", g.Step, g.Message, r.ID, g.Step, r.ID, g.Step)
		if g.Deadline != nil {
			fmt.Fprintf(w, "    rejects at %s if undecided\n", g.Deadline.Local().Format("15:04:05"))
		}
	}
}

// showSteps is each step of the run in order: its line, its attempts and
// the helpers placed after them, a parallel group's members under it.
func showSteps(w io.Writer, v *runView) {
	r := v.Run
	places := placeHelpers(r, v.Attempts, v.Helpers)
	showHelpers := func(hs []*record.AttemptRecord, indent string) {
		for _, h := range hs {
			printAttempt(w, h, indent+"↳ "+helperLabel(h)+": step "+h.Step+" ", indent+"  ")
		}
	}
	for i, s := range r.Steps {
		if s.Group > 0 && (i == 0 || r.Steps[i-1].Group != s.Group) {
			fmt.Fprintf(w, "parallel group %d:%s\n", s.Group, sideBySide(r.Steps[i:], s.Group))
		}
		showStepLine(w, s)
		first := s.FirstAttempt
		if first == 0 {
			first = 1
		}
		for _, at := range v.Attempts {
			// A step listed twice shows each occurrence's attempts.
			if at.Step != s.ID || (s.Attempts > 0 && (at.Number < first || at.Number >= first+s.Attempts)) {
				continue
			}
			label := ""
			kept := false
			if s.Candidates > 0 {
				label = fmt.Sprintf("candidate %d, ", at.Number-first+1)
				kept = at.Number == s.Chosen
			}
			printAttemptKept(w, at, "  "+label, "  ", kept)
			showHelpers(take(places.afterAttempt, attemptKey(at.Step, at.Number)), "  ")
		}
		showHelpers(take(places.afterStep, s.ID), "  ")
		if s.Group > 0 && (i == len(r.Steps)-1 || r.Steps[i+1].Group != s.Group) {
			showHelpers(take(places.afterGroup, s.Group), "")
		}
	}
	showHelpers(places.leftover(), "")
}

// showStepLine is a step's outcome, candidates, gate, reason and usage.
func showStepLine(w io.Writer, s record.StepResult) {
	if s.Group > 0 {
		fmt.Fprint(w, "│ ")
	}
	fmt.Fprintf(w, "step %s: %s", s.ID, orPending(string(s.Outcome)))
	if s.Candidates > 0 {
		fmt.Fprintf(w, "  %d candidates side by side, kept: %s", s.Candidates, keptName(s))
	}
	if d := s.Gate; d != nil {
		verb := "rejected"
		if d.Approve {
			verb = "approved"
		}
		fmt.Fprintf(w, "  gate %s by %s at %s", verb, d.By, d.At.Local().Format("15:04:05"))
	}
	if s.Reason != "" {
		fmt.Fprintf(w, " (%s)", s.Reason)
	}
	if s.Usage != nil {
		fmt.Fprintf(w, "  %s, %s tokens", fmtCost(s.Usage), fmtTokens(s.Usage.Tokens()))
	}
	fmt.Fprintln(w)
}

func orDash(s string) string {
	if s == "" {
		return "HEAD"
	}
	return s
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// sideBySide is a group's members on one line: step, outcome, attempts.
func sideBySide(steps []record.StepResult, group int) string {
	var b strings.Builder
	for i, s := range steps {
		if s.Group != group {
			break
		}
		sep := " "
		if i > 0 {
			sep = " │ "
		}
		fmt.Fprintf(&b, "%s%s %s (%d attempt(s))", sep, s.ID, orPending(string(s.Outcome)), s.Attempts)
	}
	return b.String()
}

func keptName(s record.StepResult) string {
	if s.Chosen == 0 {
		return "none"
	}
	return fmt.Sprintf("candidate %d (attempt %d); the others keep their branches", s.Chosen-s.FirstAttempt+1, s.Chosen)
}

func orPending(s string) string {
	if s == "" {
		return "pending"
	}
	return s
}

// printAttempt prints one attempt: head starts its first line, indent
// the lines of its details.
func printAttempt(w io.Writer, at *record.AttemptRecord, head, indent string) {
	printAttemptKept(w, at, head, indent, false)
}

func printAttemptKept(w io.Writer, at *record.AttemptRecord, head, indent string, kept bool) {
	oc := string(at.Outcome)
	if oc == "" {
		oc = "running"
	}
	exit := ""
	if at.ExitCode != nil {
		exit = fmt.Sprintf(" exit %d", *at.ExitCode)
	}
	if kept {
		exit += "  ← kept"
	}
	where := ""
	if at.Worker != "" {
		where = "  on worker " + at.Worker
	}
	fmt.Fprintf(w, "%sattempt %d/%d: %s%s  %s  sandbox %s (%s)%s\n", head, at.Number, at.Of, oc, exit, fmtDur(at.Duration()), at.Mode, at.ModeOrigin, where)
	if at.Reason != "" {
		fmt.Fprintf(w, indent+"  reason: %s: %s\n", at.Reason, at.Message)
		if at.Fix != "" {
			fmt.Fprintf(w, indent+"  fix: %s\n", at.Fix)
		}
	}
	if at.Usage != nil {
		fmt.Fprintf(w, indent+"  usage: %s\n", usageLine(at.Usage))
		for _, m := range at.Usage.ModelNames() {
			mu := at.Usage.Models[m]
			mc := "-"
			if mu.CostUSD != nil {
				mc = fmt.Sprintf("$%.4f", *mu.CostUSD)
			}
			fmt.Fprintf(w, indent+"    %s: %s, input %s, output %s\n", m, mc, fmtTokens(mu.InputTokens), fmtTokens(mu.OutputTokens))
		}
	}
	if at.Egress != nil {
		fmt.Fprintf(w, indent+"  egress: %d connection(s), %d B up, %d B down, %d refused (egress.log)\n", at.Egress.Connections, at.Egress.BytesUp, at.Egress.BytesDown, at.Egress.Refusals)
	}
	for _, wt := range at.Worktrees {
		ch := ""
		if wt.Changed {
			ch = " (changed)"
		}
		fmt.Fprintf(w, indent+"  %s: %s at %s%s\n", wt.Repo, wt.Branch, short(wt.HeadSHA), ch)
	}
	for _, p := range at.Processes {
		if len(p.Argv) > 0 {
			fmt.Fprintf(w, indent+"  argv: %s\n", clip(strings.Join(p.Argv, " "), 100))
		}
	}
}
