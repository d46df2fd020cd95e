package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("secrets", newSecretsCmd) }

// newSecretsCmd lists and removes what kusaw config set --secret stored:
// names only, never a value.
func newSecretsCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "secrets", Short: "list or remove the secret store's keys (never their values)"}
	c.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "list the stored keys",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			store, err := secretstore.Open()
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			keys, err := store.Keys()
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			if len(keys) == 0 {
				fmt.Fprintf(a.stdout, "no secrets stored in %s (store one with kusaw config set KEY --secret)\n", store.Dir())
				return nil
			}
			for _, k := range keys {
				fmt.Fprintln(a.stdout, termSafe(k))
			}
			return nil
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "rm KEY",
		Short: "remove a stored key (the file's {secret: KEY} reference stays: validate then names it missing)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			store, err := secretstore.Open()
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			ok, err := store.Delete(args[0])
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			if !ok {
				keys, _ := store.Keys()
				hint := "kusaw secrets list names the stored keys"
				if len(keys) > 0 && len(keys) <= 10 {
					hint = "stored: " + strings.Join(keys, ", ")
				}
				return exitf(status.ExitUsage, "no secret %q in %s (%s)", args[0], store.Dir(), hint)
			}
			fmt.Fprintf(a.stdout, "removed %s from %s\n", termSafe(args[0]), store.Dir())
			return nil
		},
	})
	return c
}
