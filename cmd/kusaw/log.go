package main

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/cluster/enroll"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("log", newLogCmd) }

func newLogCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "log",
		Short: "work with kusaw's tamper-evident logs (events.jsonl, egress.log)",
	}
	var keyFile string
	var strict bool
	var expect string
	verify := &cobra.Command{
		Use:   "verify FILE|RUN...",
		Short: "check a log's hash chain and signed seals; prints OK with counts or the first broken line",
		Long: `Checks each line's link to the line before it and each seal's signature
against the factory's public key. A run's id stands for every log of the
run: its events.jsonl and each attempt's (helpers' too) events.jsonl and
egress.log. Every seal covers the file's place (run,
step, attempt, and kind: events or egress): a file in a state directory is
checked against where it lies, a copied file against --expect, and a run's
events against the last seal its run.json names. Lines after the last seal
(left by a crash, or by a writer still running) are chained but not signed,
and are reported as not sealed. Exit status 0 when every file verifies, 7
when one does not (with --strict also when one is not closed with a final
seal, or holds lines recovery found unsealed).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return a.logVerify(args, keyFile, expect, strict) },
	}
	verify.Flags().StringVar(&keyFile, "key", "", "the factory's public key (PEM); default: "+chainlog.PublicKeyFile+" in kusaw's secret-store folder")
	verify.Flags().BoolVar(&strict, "strict", false, "also fail when a log is not closed with a final seal, or holds lines recovery found unsealed")
	verify.Flags().StringVar(&expect, "expect", "", "the place a copied log must be from: RUN (a run's events) or RUN/STEP/N (an attempt's events.jsonl or egress.log)")
	cmd.AddCommand(verify)
	return cmd
}

// logVerify is kusaw log verify: each file (or each log of a run) is
// checked, its verdict printed, and the exit code is 7 when one fails.
func (a *app) logVerify(args []string, keyFile, expect string, strict bool) error {
	pub, err := logVerifyKey(keyFile)
	if err != nil {
		return err
	}
	var paths []string
	for _, arg := range args {
		ps, err := a.logsOf(arg)
		if err != nil {
			return err
		}
		paths = append(paths, ps...)
	}
	failed := false
	for _, p := range paths {
		v, err := verifyLog(p, pub, expect)
		if err != nil {
			return err
		}
		printVerdict(a.stdout, v)
		failed = failed || !v.passes(strict)
	}
	if failed {
		return silentExit(status.ExitVerifyFailed)
	}
	return nil
}

// logVerifyKey finds the key seals are checked against. It comes from the
// secret store (or a file the user names), never from beside the log: the
// store is outside every sandbox and the state directory, so whoever can
// rewrite a log cannot also replace the key. A public key kept next to the
// records proves nothing, because a forger would re-sign the edited log
// with a key of their own and put that key's copy there.
func logVerifyKey(keyFile string) (ed25519.PublicKey, error) {
	if keyFile == "" {
		dir, err := secretstore.Dir()
		if err != nil {
			return nil, exitf(status.ExitNotFound, "%v, or pass --key FILE", err)
		}
		keyFile = filepath.Join(dir, chainlog.PublicKeyFile)
		if _, err := os.Stat(keyFile); errors.Is(err, os.ErrNotExist) {
			// The private key holds the public half, for stores made
			// before the public file was written.
			priv := filepath.Join(dir, chainlog.KeyFile)
			if _, err := os.Stat(priv); err != nil {
				return nil, exitf(status.ExitNotFound, "no log-signing key in %s (kusaw creates it with the first run's logs); pass --key FILE with the public key of the factory that wrote the log", dir)
			}
			keyFile = priv
		}
	}
	pub, err := chainlog.LoadPublicKey(keyFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, exitf(status.ExitNotFound, "key file %s does not exist", keyFile)
	}
	if err != nil {
		return nil, exitf(status.ExitUsage, "%v (--key takes an ed25519 public key in PEM)", err)
	}
	return pub, nil
}

// logExpect is the place a log must verify for: --expect, else the
// file's place in a state directory, else none (the log's own claim is
// checked and reported). runDir is set for a log in its run's folder.
func logExpect(path, expect string) (b chainlog.Binding, runDir, how string, err error) {
	if expect != "" {
		kind := record.LogKind(filepath.Base(path))
		b, err := chainlog.ParseOf(expect, kind)
		if err != nil {
			return b, "", "", exitf(status.ExitUsage, "--expect %v (give RUN for a run's events, RUN/STEP/N for an attempt's log)", err)
		}
		if kind == "" {
			return b, "", "", exitf(status.ExitUsage, "--expect: %s is neither %s nor %s, so its kind is unknown; copy it under one of those names", path, record.EventsFile, record.EgressLogFile)
		}
		return b, "", "as expected", nil
	}
	if b, runDir, ok := record.LogPlace(path); ok {
		return b, runDir, "at its place", nil
	}
	return chainlog.Binding{}, "", "", nil
}

// logVerdict is what kusaw log verify found in one file.
type logVerdict struct {
	path string
	// broken is why the file does not verify; breakAt says it is a line
	// that breaks the chain (or a seal), and sealed how many lines before
	// it verify and are sealed.
	broken  error
	breakAt bool
	sealed  int
	empty   bool     // no line at all
	counts  string   // lines, records, seals, key and place
	closed  string   // how it ends, when nothing is wrong
	notes   []string // lines the seals do not vouch for (they fail --strict)
}

// passes is the verdict's part in the exit code: a broken file fails; an
// empty one, or one with lines its seals do not vouch for, fails --strict.
func (v *logVerdict) passes(strict bool) bool {
	switch {
	case v.broken != nil:
		return false
	case v.empty || len(v.notes) > 0:
		return !strict
	}
	return true
}

// verifyLog checks one file against its place (logExpect) and the key.
// An error is a file that cannot be read (with its exit code).
func verifyLog(path string, pub ed25519.PublicKey, expect string) (*logVerdict, error) {
	v := &logVerdict{path: path}
	want, runDir, how, err := logExpect(path, expect)
	if err != nil {
		return nil, err
	}
	// A remote attempt's egress.log is sealed on the worker that ran it,
	// with the key the worker enrolled: check it against that key, which
	// serve recorded at enrollment (docs/cluster.md).
	if want.Kind == chainlog.KindEgress && runDir != "" {
		wpub, worker, werr := workerKey(filepath.Dir(path), runDir)
		if werr != nil {
			v.broken = werr
			return v, nil
		}
		if wpub != nil {
			pub = wpub
			how += ", sealed by worker " + worker
		}
	}
	if runDir != "" && want.Kind == chainlog.KindEvents && want.Step == "" {
		record.AwaitRunSeal(runDir) // a run that just ended: its seal comes a moment later
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, exitf(status.ExitNotFound, "log %s does not exist", path)
	}
	if err != nil {
		return nil, exitf(status.ExitNotFound, "%v", err)
	}
	defer f.Close()
	res, verr := chainlog.Verify(f, pub, want)
	if verr != nil {
		var be *chainlog.BreakError
		if !errors.As(verr, &be) {
			return nil, exitf(status.ExitRunFailed, "%s: %v", path, verr)
		}
		v.broken, v.breakAt, v.sealed = be, true, res.Sealed
		return v, nil
	}
	if res.Lines == 0 {
		v.empty = true
		return v, nil
	}
	if runDir != "" && res.Binding.Step == "" {
		if err := record.CheckRunSeal(runDir, res); err != nil {
			v.broken = err
			return v, nil
		}
	}
	v.sealed = res.Sealed
	for _, r := range res.Recovered {
		if r.Unsealed > 0 {
			v.notes = append(v.notes, fmt.Sprintf("%s recovered-unsealed: the writer died before sealing them; recovery (line %d) found them unsigned and did not vouch for them, so they could have been changed", span(r.From, r.To), r.Line))
		}
		if r.DroppedBytes > 0 {
			v.notes = append(v.notes, fmt.Sprintf("line %d: recovery cut off a torn last line of %d bytes before it", r.Line, r.DroppedBytes))
		}
	}
	switch {
	case res.Final:
	case res.Unsealed() > 0:
		v.notes = append(v.notes, fmt.Sprintf("%s NOT sealed (the writer stopped without closing, or is still running), so could have been changed", span(res.Sealed+1, res.Lines)))
	default:
		v.notes = append(v.notes, fmt.Sprintf("not closed: no final seal after line %d (the writer stopped without closing, or is still running)", res.Lines))
	}
	where := "the " + res.Binding.String()
	if how != "" {
		where += " (" + how + ")"
	} else {
		where += " (as the log says; pass --expect to check a copied file)"
	}
	v.counts = fmt.Sprintf("%d lines (%d records, %d seals), key %s, %s", res.Lines, res.Records, res.Seals, res.KeyID, where)
	v.closed = "closed with a final seal"
	if len(res.Recovered) > 0 {
		v.closed += fmt.Sprintf("; continued by recovery after its writer died (line %d)", res.Recovered[len(res.Recovered)-1].Line)
	}
	return v, nil
}

// printVerdict is a file's verdict, each line starting with its path.
func printVerdict(w io.Writer, v *logVerdict) {
	switch {
	case v.broken != nil && v.breakAt:
		fmt.Fprintf(w, "%s: BROKEN at %v\n", v.path, v.broken)
		if v.sealed > 0 {
			fmt.Fprintf(w, "%s:   lines 1-%d verify and are sealed\n", v.path, v.sealed)
		}
	case v.broken != nil:
		fmt.Fprintf(w, "%s: BROKEN: %v\n", v.path, v.broken)
	case v.empty:
		fmt.Fprintf(w, "%s: OK: empty (the writer never wrote a line)\n", v.path)
	case len(v.notes) == 0:
		fmt.Fprintf(w, "%s: OK: %s; %s\n", v.path, v.counts, v.closed)
	default:
		fmt.Fprintf(w, "%s: OK up to line %d (its last seal): %s\n", v.path, v.sealed, v.counts)
		for _, n := range v.notes {
			fmt.Fprintf(w, "%s:   %s\n", v.path, n)
		}
	}
}

func span(from, to int) string {
	if from == to {
		return fmt.Sprintf("line %d is", from)
	}
	return fmt.Sprintf("lines %d-%d are", from, to)
}

// workerKey is the enrolled key of the worker that ran the attempt in dir
// (nil when serve ran it itself).
func workerKey(dir, runDir string) (ed25519.PublicKey, string, error) {
	b, err := os.ReadFile(filepath.Join(dir, record.AttemptFile))
	if err != nil {
		return nil, "", nil
	}
	var rec record.AttemptRecord
	if json.Unmarshal(b, &rec) != nil || rec.Worker == "" {
		return nil, "", nil
	}
	state := filepath.Dir(filepath.Dir(runDir))
	e := enroll.OpenRegistry(filepath.Join(state, record.ClusterDir)).Known(rec.Worker)
	if e == nil {
		return nil, rec.Worker, fmt.Errorf("sealed by worker %s, which this serve never enrolled", rec.Worker)
	}
	pub, err := enroll.PublicSigningKey(e.NKey)
	return pub, rec.Worker, err
}

// logsOf is the logs an argument of log verify names: the file itself, or,
// when no such file exists and a run has that id, every log of the run.
func (a *app) logsOf(arg string) ([]string, error) {
	if _, err := os.Stat(arg); err == nil || !errors.Is(err, os.ErrNotExist) || strings.ContainsRune(arg, os.PathSeparator) {
		return []string{arg}, nil
	}
	st, err := a.openState()
	if err != nil {
		return nil, err
	}
	dir := st.RunDir(arg)
	if _, err := os.Stat(filepath.Join(dir, record.RunFile)); err != nil {
		return nil, exitf(status.ExitNotFound, "%s is neither a log file nor a run of %s (kusaw runs lists the runs)", arg, st.Dir)
	}
	var out []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case record.WorktreesDir, record.TmpDir, record.ObjectsDir, record.RefStoreDir:
				return filepath.SkipDir // the step's files, not kusaw's logs
			}
			return nil
		}
		if d.Name() == record.EventsFile || d.Name() == record.EgressLogFile {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, exitf(status.ExitInternal, "reading run %s: %v", arg, err)
	}
	return out, nil
}
