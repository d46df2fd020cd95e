package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/worker"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

func init() {
	addCommand(newClusterCmd)
	addCommand(newWorkerCmd)
	addCommand(newWorkersCmd)
}

// serveOnly is the running serve's client, or the error that says none runs.
func (a *app) serveOnly() (*client.Client, error) {
	f, err := a.loadFactory()
	if err != nil {
		return nil, err
	}
	c, err := a.serveClient(f.StateDir)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, exitf(status.ExitServeUnavailable, "kusaw serve is not running for %s: start it (kusaw serve, or kusaw service install)", f.StateDir)
	}
	return c, nil
}

func newClusterCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "serve's cluster of workers (docs/cluster.md)"}
	var addr string
	var g cluster.Grant
	tok := &cobra.Command{
		Use:   "token",
		Short: "print a one-time join token for kusaw worker --join (where the cluster is, how to check its certificate, a secret, the pools its worker may take; valid 24h)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if _, err := g.Normal(); err != nil {
				return exitf(status.ExitUsage, "%v", err)
			}
			cl, err := a.serveOnly()
			if err != nil {
				return err
			}
			t, err := cl.ClusterToken(c.Context(), addr, g.Pools, g.AnyPool)
			if err != nil {
				return exitf(status.ExitServeUnavailable, "%v", err)
			}
			fmt.Fprintln(a.stdout, t.Token)
			return nil
		},
	}
	tok.Flags().StringVar(&addr, "addr", "", "the host:port workers reach serve's cluster by (default: serve.cluster.listen); with serve.cluster.nats_url, the cluster's URLs as workers reach them (default: nats_url)")
	tok.Flags().StringArrayVar(&g.Pools, "pool", nil, "a pool the worker may take attempts of (repeatable; default: pool default only)")
	tok.Flags().BoolVar(&g.AnyPool, "any-pool", false, "let the worker take attempts of every pool, present and future (not with --pool)")
	cmd.AddCommand(tok)
	return cmd
}

func newWorkersCmd(a *app) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "list the cluster's workers: name, pools offered, pools allowed by its join token, attempts running, last heartbeat, version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := a.serveOnly()
			if err != nil {
				return err
			}
			ws, err := cl.Workers(c.Context())
			if err != nil {
				return exitf(status.ExitServeUnavailable, "%v", err)
			}
			if jsonOut {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"workers": ws})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPOOLS\tALLOWED\tRUNNING\tLAST HEARTBEAT\tVERSION")
			for _, w := range ws {
				last := "never"
				if w.LastHeartbeat != nil {
					last = time.Since(*w.LastHeartbeat).Round(time.Second).String() + " ago"
				}
				if w.Lost {
					last += " (lost)"
				}
				allowed := strings.Join(w.AllowedPools, ",")
				if allowed == cluster.AnyPool {
					allowed = "any"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", termSafe(w.Name), termSafe(strings.Join(w.Pools, ",")), termSafe(allowed), w.Running, w.MaxParallel, last, termSafe(w.Version))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func newWorkerCmd(a *app) *cobra.Command {
	var join, name, stateDir string
	var pools []string
	var maxParallel int
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "run attempts for a kusaw serve on this machine, under this machine's sandbox and proxy (enroll once with --join)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if stateDir == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return exitf(status.ExitUsage, "cannot find the home folder: set --state-dir")
				}
				stateDir = filepath.Join(home, ".local", "state", "kusaw-worker")
			}
			if name == "" {
				h, _ := os.Hostname()
				name = strings.Map(func(r rune) rune {
					if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
						return r
					}
					return '-'
				}, h)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if join != "" {
				id, err := worker.Join(ctx, stateDir, join, name, versionInfo().Version, pools)
				if err != nil {
					return exitf(status.ExitNotEnrolled, "%v", err)
				}
				fmt.Fprintf(a.stderr, "kusaw worker %s: enrolled with serve at %s\n", id.Name, id.Server)
			}
			exe, _ := os.Executable()
			w, err := worker.New(ctx, worker.Options{StateDir: stateDir, Pools: pools, MaxParallel: maxParallel, Version: versionInfo().Version, Kusaw: exe,
				Logf: func(format string, args ...any) { fmt.Fprintf(a.stderr, "kusaw worker: "+format+"\n", args...) }})
			if err != nil {
				if errors.Is(err, cluster.ErrNotEnrolled) || errors.Is(err, worker.ErrPoolNotAllowed) || errors.Is(err, cluster.ErrNotJoined) {
					return exitf(status.ExitNotEnrolled, "%v", err)
				}
				return exitf(status.ExitServeUnavailable, "%v", err)
			}
			defer w.Close()
			fmt.Fprintf(a.stderr, "kusaw worker %s: ready (pools %s, %d at once)\n", w.Name(), strings.Join(w.Pools(), ","), max(1, maxParallel))
			return w.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&join, "join", "", "enroll with a token from kusaw cluster token (the identity stays in --state-dir; a new token joins it again with that token's pools)")
	cmd.Flags().StringVar(&name, "name", "", "the worker's name (default: the host name)")
	cmd.Flags().StringArrayVar(&pools, "pool", nil, "a pool to take attempts from, one its join token allows (repeatable; default: every pool the token allows)")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 1, "attempts at once")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "the worker's folder: identity, cache repositories, attempts (default ~/.local/state/kusaw-worker)")
	return cmd
}
