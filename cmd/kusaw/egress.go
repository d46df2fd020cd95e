package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("egress", newEgressCmd) }

func newEgressCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "egress",
		Short: "the allowlist proxy: explain a decision (check), learn an allowlist from an audit run (suggest)",
	}
	c.AddCommand(newEgressCheckCmd(a), newEgressSuggestCmd(a))
	return c
}

func newEgressCheckCmd(a *app) *cobra.Command {
	var step string
	var asJSON bool
	c := &cobra.Command{
		Use:   "check HOST[:PORT] [--step ID] [--json]",
		Short: "what the proxy would do with a connection to HOST:PORT (default 443) from the step's sandbox, and why",
		Long: `Runs the proxy's own decision on HOST:PORT (a URL works too) under the
allowlist the step's attempts get (without --step, each step's of the
default pipeline in turn: the first that allows it decides, and the answer
names it; the factory's when there is no default pipeline): allowed by
which entry and where it came from (factory, step:ID, provider:NAME), or
refused by which rule, with the one change that would admit it. The name is
resolved as the proxy resolves it (sandbox.egress.resolver), so the address
guard runs too. Budgets are not part of the answer.

Exit status: 0 when the connection would be allowed (in audit mode also when
only audit admits it), 8 (egress_refused) when it would be refused, 2 for a
bad argument or an unknown step.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.egressCheck(args[0], step, newPrinter(a.stdout, asJSON, printEgressVerdict))
		},
	}
	c.Flags().StringVar(&step, "step", "", "decide under this step's allowlist (default: the default pipeline's steps, the first that allows it)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the decision as JSON")
	return c
}

// egressCheck is kusaw egress check: the proxy's decision on target under
// the step's allowlist (or the default pipeline's steps'), printed; exit
// 8 when it would be refused.
func (a *app) egressCheck(target, step string, p printer[egress.Verdict]) error {
	host, port, err := parseCheckTarget(target)
	if err != nil {
		return exitf(status.ExitUsage, "%v", err)
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
	var v egress.Verdict
	if step == "" {
		v, err = e.EgressCheckPipeline(context.Background(), host, port)
	} else {
		v, err = e.EgressCheck(context.Background(), step, host, port)
	}
	if errors.Is(err, record.ErrUnknownStep) {
		return exitf(status.ExitUsage, "%v", err)
	}
	if err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	p.Print(v)
	if !v.Allowed {
		return silentExit(status.ExitEgressRefused)
	}
	return nil
}

// parseCheckTarget reads HOST, HOST:PORT, [V6]:PORT or a URL.
func parseCheckTarget(s string) (string, int, error) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || u.Hostname() == "" {
			return "", 0, fmt.Errorf("%q is not a URL with a host", s)
		}
		port := 443
		if u.Scheme == "http" || u.Scheme == "ws" {
			port = 80
		}
		if ps := u.Port(); ps != "" {
			port, _ = strconv.Atoi(ps)
		}
		return u.Hostname(), port, nil
	}
	if h, ps, err := net.SplitHostPort(s); err == nil {
		port, err := strconv.Atoi(ps)
		if err != nil || port < 1 || port > 65535 {
			return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", ps)
		}
		return h, port, nil
	}
	if s == "" {
		return "", 0, errors.New("name a host: kusaw egress check HOST[:PORT]")
	}
	return strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), 443, nil
}

// printEgressVerdict is kusaw egress check's text.
func printEgressVerdict(w io.Writer, v egress.Verdict) {
	where := net.JoinHostPort(v.Host, strconv.Itoa(v.Port))
	switch {
	case v.WouldRefuse:
		fmt.Fprintf(w, "allowed (audit only): %s\n  allowlist would refuse it: %s\n", where, v.Line)
	case v.Allowed:
		fmt.Fprintf(w, "allowed: %s by %s (%s)\n", where, v.Rule, v.Origin)
	default:
		fmt.Fprintf(w, "refused: %s (%s)\n  %s\n", where, v.Reason, v.Line)
		if v.Rule != "" {
			fmt.Fprintf(w, "  the name is admitted by %s (%s)\n", v.Rule, v.Origin)
		}
	}
	if len(v.Addrs) > 0 {
		addrs := make([]string, len(v.Addrs))
		for i, ad := range v.Addrs {
			addrs[i] = ad.String()
		}
		fmt.Fprintf(w, "  addresses: %s\n", strings.Join(addrs, ", "))
	}
	for _, n := range v.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	switch {
	case v.Fix != "":
		fmt.Fprintf(w, "  fix: %s\n", v.Fix)
	case !v.Allowed:
		fmt.Fprintln(w, "  fix: none; no setting admits it")
	}
}

func newEgressSuggestCmd(a *app) *cobra.Command {
	var step string
	var asJSON bool
	c := &cobra.Command{
		Use:   "suggest RUN [--step S] [--json]",
		Short: "the allow entries a run needed (audit mode's admitted hosts, allowlist mode's refused ones), ready to paste",
		Long: `Reads the egress.log of each attempt of RUN (or of step S), its
helpers' (fixers, judges, resolve steps) too, and prints
the allow entries of every host that audit mode admitted although the
allowlist lacked it (logged would_refuse), with the connections and the
bytes sent and received, and of every host allowlist mode refused for
want of an entry (not an address no entry admits: metadata, IP literals,
private addresses). Paste them under sandbox.egress.allow (or the
step's); an audit run's, then switch network: audit to allowlist.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.egressSuggest(args[0], step, newPrinter(a.stdout, asJSON, printSuggestions))
		},
	}
	c.Flags().StringVar(&step, "step", "", "only this step's attempts")
	c.Flags().BoolVar(&asJSON, "json", false, "print the entries as JSON")
	return c
}

// suggestions is what kusaw egress suggest found for a run; its JSON is
// the list of entries.
type suggestions struct {
	run     string
	entries []record.Suggestion
}

func (s suggestions) MarshalJSON() ([]byte, error) { return json.Marshal(s.entries) }

// egressSuggest is kusaw egress suggest: the allow entries a run (or one
// of its steps) needed, from each attempt's egress.log, helpers' too.
func (a *app) egressSuggest(id, step string, p printer[suggestions]) error {
	st, err := a.openStore()
	if err != nil {
		return err
	}
	r, err := loadRun(st, id)
	if err != nil {
		return err
	}
	atts, err := st.Attempts(r)
	if err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	// A fixer, a judge or a resolve step connects out too: its hosts
	// belong in the allowlist as much as the steps'.
	helpers, err := st.Helpers(r)
	if err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	atts = append(atts, helpers...)
	var logs [][]byte
	found := step == ""
	for _, at := range atts {
		if step != "" && at.Step != step {
			continue
		}
		found = true
		b, err := st.ReadLog(r.ID, fmt.Sprintf("%s/%s/%d/%s", record.StepsDir, at.Step, at.Number, record.EgressLogFile), 0, 256<<20)
		if err != nil {
			return exitf(status.ExitInternal, "%v", err)
		}
		logs = append(logs, b)
	}
	if !found {
		return exitf(status.ExitNotFound, "run %s has no step %q", r.ID, step)
	}
	p.Print(suggestions{run: r.ID, entries: record.EgressSuggest(logs...)})
	return nil
}

// printSuggestions is kusaw egress suggest's text: entries to paste.
func printSuggestions(w io.Writer, s suggestions) {
	if len(s.entries) == 0 {
		fmt.Fprintf(w, "# run %s needed no host outside its allowlist\n", s.run)
		return
	}
	fmt.Fprintln(w, "allow:")
	for _, e := range s.entries {
		if e.Refused > 0 && e.Connections == 0 {
			fmt.Fprintf(w, "  - %s  # %d connection(s) refused\n", e.Entry, e.Refused)
			continue
		}
		fmt.Fprintf(w, "  - %s  # %d connection(s), %d bytes sent, %d received\n", e.Entry, e.Connections, e.BytesUp, e.BytesDown)
	}
}
