package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand(newConfigCmd) }

// Keys whose secret is referenced from the file; other keys are only stored
// (an inject entry names them with secret: KEY).
var fileSecretKey = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(steps\.[^ ]+\.env\.[A-Za-z_][A-Za-z0-9_]*|providers\.[a-z-]+\.api_key|serve\.cluster\.signing_key)$`)
})

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
({secret: KEY}) for steps.<id>.env.<NAME>, providers.<name>.api_key and
serve.cluster.signing_key.`,
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
	if fileSecretKey().MatchString(key) {
		// Check the file can take the reference before storing anything.
		p, err := a.factoryPath()
		if err != nil {
			return err
		}
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
