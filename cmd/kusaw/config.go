package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("config", newConfigCmd) }

func newConfigCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "read and change factory.yaml and the secret store"}
	var secret bool
	set := &cobra.Command{
		Use:   "set KEY [VALUE] [--secret]",
		Short: "set a key in factory.yaml, keeping its comments; --secret reads the value from stdin into the secret store",
		Long: `Sets KEY (a dotted path such as steps.test.timeout) to VALUE, written as YAML
("45m", "true", "[a, b]"). The file keeps its comments and key order.

With --secret the value is read from standard input (without echo on a
terminal) into the secret store, and the file gets a reference to it
({secret: KEY}) when KEY is a secret field of the file's schema
(steps.<id>.env.<NAME>, providers.<name>.api_key, forges.<forge>.token,
pipelines.<name>.deliver.pull_request.token, ...). A key of the file that
is no secret field, or misspelt, is refused with the nearest name; any
other KEY (one an inject entry names with secret: KEY) is stored only.
kusaw secrets list and kusaw secrets rm KEY show and remove stored names.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if secret {
				if len(args) == 2 {
					return exitf(status.ExitUsage, "with --secret the value is read from stdin, not the command line (where it would stay in shell history); run: kusaw config set %s --secret", key)
				}
				return a.setSecret(key)
			}
			if len(args) != 2 {
				return exitf(status.ExitUsage, "config set %s needs a VALUE (or --secret to read one from stdin)", key)
			}
			return a.setValue(key, args[1])
		},
	}
	set.Flags().BoolVar(&secret, "secret", false, "read the value from stdin into the secret store")
	get := &cobra.Command{
		Use:   "get KEY",
		Short: "print a key's value from factory.yaml (a secret prints as <secret>)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.factoryPath()
			if err != nil {
				return err
			}
			e, err := config.OpenEdit(p)
			if err != nil {
				return exitf(status.ExitInvalidConfig, "%v", err)
			}
			n, err := e.Get(args[0])
			if err != nil {
				return exitf(status.ExitNotFound, "%v", err)
			}
			fmt.Fprintln(a.stdout, config.NodeString(n))
			return nil
		},
	}
	c.AddCommand(set, get)
	return c
}

func (a *app) setValue(key, raw string) error {
	p, err := a.factoryPath()
	if err != nil {
		return err
	}
	e, err := config.OpenEdit(p)
	if err != nil {
		return exitf(status.ExitInvalidConfig, "%v", err)
	}
	v, _ := config.ParseValue(raw)
	if err := e.Set(key, v); err != nil {
		return exitf(status.ExitUsage, "%v", err)
	}
	if err := e.Save(key); err != nil {
		return exitf(status.ExitInvalidConfig, "%v", err)
	}
	fmt.Fprintf(a.stdout, "%s = %s\n", key, config.NodeString(v))
	return nil
}

func (a *app) setSecret(key string) error {
	val, err := readSecret(a.stdin, a.stderr, key)
	if err != nil {
		return exitf(status.ExitUsage, "%v", err)
	}
	store, err := secretstore.Open()
	if err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	// The schema says which keys are secret references; a key of the
	// file's that is none (a typo, an unknown provider) is refused before
	// anything is stored.
	var field bool
	p, perr := a.factoryPath()
	switch {
	case slices.Contains(ownSecrets, key):
		// kusaw's own (serve's API token): no key of the file.
	case perr == nil:
		f, _, lerr := config.Load(p)
		names := func(path string) []string { return fileNames(f, path) }
		if lerr != nil {
			names = nil
		}
		field, err = config.SecretField(key, names)
		if err != nil {
			return exitf(status.ExitUsage, "%v", err)
		}
	default:
		if ok, ferr := config.SecretField(key, nil); ok || ferr != nil {
			return perr
		}
	}
	if field {
		// Check the file can take the reference before storing anything.
		e, err := config.OpenEdit(p)
		if err != nil {
			return exitf(status.ExitInvalidConfig, "%v", err)
		}
		if err := e.Set(key, config.SecretRefNode(key)); err != nil {
			return exitf(status.ExitUsage, "%v", err)
		}
		if err := store.Set(key, val); err != nil {
			return exitf(status.ExitInternal, "%v", err)
		}
		if err := e.Save(key); err != nil {
			return exitf(status.ExitInvalidConfig, "%v", err)
		}
		fmt.Fprintf(a.stdout, "%s = <secret> (stored in %s)\n", key, store.Dir())
		return nil
	}
	if err := store.Set(key, val); err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	fmt.Fprintf(a.stdout, "%s stored in the secret store (%s); reference it as secret: %s\n", key, store.Dir(), key)
	return nil
}

// readSecret reads one line from stdin; on a terminal it turns echo off.
func readSecret(in io.Reader, prompt io.Writer, key string) (string, error) {
	if f, ok := in.(*os.File); ok {
		if t, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios); err == nil {
			fmt.Fprintf(prompt, "value for %s (not echoed): ", key)
			off := *t
			off.Lflag &^= unix.ECHO
			if err := unix.IoctlSetTermios(int(f.Fd()), ioctlSetTermios, &off); err == nil {
				defer func() {
					unix.IoctlSetTermios(int(f.Fd()), ioctlSetTermios, t)
					fmt.Fprintln(prompt)
				}()
			}
		}
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("cannot read the secret from stdin: %v", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("no value on stdin; pipe it in: printf %%s \"$TOKEN\" | kusaw config set %s --secret", key)
	}
	return line, nil
}

// fileNames are the names a map of the factory file holds.
func fileNames(f *config.Factory, path string) []string {
	if f == nil {
		return nil
	}
	switch path {
	case "steps":
		return f.StepOrder
	case "pipelines":
		return f.PipelineOrder
	case "repos":
		return f.RepoOrder
	case "triggers":
		return f.TriggerOrder
	case "providers":
		var out []string
		for name := range f.Providers {
			out = append(out, name)
		}
		return out
	}
	return nil
}

// ownSecrets are the secrets kusaw itself reads by name: stored only,
// though their names start like a key of the file.
var ownSecrets = []string{client.TokenSecretKey}
