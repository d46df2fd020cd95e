package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand(newLogCmd) }

func newLogCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "log",
		Short: "work with kusaw's tamper-evident logs (events.jsonl, egress.log)",
	}
	var keyFile string
	var strict bool
	verify := &cobra.Command{
		Use:   "verify FILE...",
		Short: "check a log's hash chain and signed seals; prints OK with counts or the first broken line",
		Long: `Checks each line's link to the line before it and each seal's signature
against the factory's public key. Lines after the last seal (left by a crash,
or by a writer still running) are chained but not signed, and are reported
as not sealed. Exit status 0 when every file verifies, 7 when one does not
(with --strict also when one is not closed with a final seal).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, files []string) error {
			pub, err := logVerifyKey(keyFile)
			if err != nil {
				return err
			}
			failed := false
			for _, f := range files {
				ok, err := verifyLogFile(a, f, pub, strict)
				if err != nil {
					return err
				}
				failed = failed || !ok
			}
			if failed {
				return silentExit(status.ExitVerifyFailed)
			}
			return nil
		},
	}
	verify.Flags().StringVar(&keyFile, "key", "", "the factory's public key (PEM); default: "+chainlog.PublicKeyFile+" in kusaw's secret-store folder")
	verify.Flags().BoolVar(&strict, "strict", false, "also fail when a log is not closed with a final seal")
	cmd.AddCommand(verify)
	return cmd
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

// verifyLogFile prints one file's verdict and reports whether it passed.
func verifyLogFile(a *app, path string, pub ed25519.PublicKey, strict bool) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, exitf(status.ExitNotFound, "log %s does not exist", path)
	}
	if err != nil {
		return false, exitf(status.ExitNotFound, "%v", err)
	}
	defer f.Close()
	res, verr := chainlog.Verify(f, pub)
	if verr != nil {
		var be *chainlog.BreakError
		if !errors.As(verr, &be) {
			return false, exitf(status.ExitRunFailed, "%s: %v", path, verr)
		}
		fmt.Fprintf(a.stdout, "%s: BROKEN at %v\n", path, be)
		if res.Sealed > 0 {
			fmt.Fprintf(a.stdout, "%s:   lines 1-%d verify and are sealed\n", path, res.Sealed)
		}
		return false, nil
	}
	counts := fmt.Sprintf("%d lines (%d records, %d seals), key %s", res.Lines, res.Records, res.Seals, res.KeyID)
	switch {
	case res.Lines == 0:
		fmt.Fprintf(a.stdout, "%s: OK: empty (the writer never wrote a line)\n", path)
		return !strict, nil
	case res.Final:
		fmt.Fprintf(a.stdout, "%s: OK: %s; closed with a final seal\n", path, counts)
		return true, nil
	case res.Unsealed() == 0:
		fmt.Fprintf(a.stdout, "%s: OK: %s; all sealed, but not closed (the writer stopped right after a seal, or is still running)\n", path, counts)
	case res.Sealed == 0:
		fmt.Fprintf(a.stdout, "%s: OK: %s; NO line is sealed: the chain is intact but nothing is signed (the writer stopped before its first seal, or is still running)\n", path, counts)
	default:
		tail := fmt.Sprintf("lines %d-%d are", res.Sealed+1, res.Lines)
		if res.Unsealed() == 1 {
			tail = fmt.Sprintf("line %d is", res.Lines)
		}
		fmt.Fprintf(a.stdout, "%s: OK up to line %d (its last seal): %s; %s NOT sealed (the writer stopped without closing, or is still running), so could have been changed\n",
			path, res.Sealed, counts, tail)
	}
	return !strict, nil
}
