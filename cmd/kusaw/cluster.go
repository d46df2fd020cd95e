package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/cluster/enroll"
	"github.com/kusaw/kusaw/cluster/natsconf"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/daemon"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

func init() {
	addCommand("cluster", newClusterCmd)
	addCommand("worker", newWorkerCmd)
	addCommand("workers", newWorkersCmd)
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
	var g enroll.Grant
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
	cmd.AddCommand(tok, newNATSConfigCmd(a))
	return cmd
}

func newNATSConfigCmd(a *app) *cobra.Command {
	var o natsconf.Options
	var maxStore string
	var jsonOut bool
	c := &cobra.Command{
		Use:   "nats-config --dir DIR --server HOST:PORT [--server HOST:PORT ...]",
		Short: "write a NATS server configuration for kusaw (1, 3 or 5 servers): TLS, routes, JetStream, operator and account JWTs with a memory resolver, and what serve needs",
		Long: `Writes into --dir what an existing NATS cluster for kusaw needs (docs/cluster.md,
"An existing NATS cluster"), without nsc: a CA (or --ca-cert/--ca-key, or your
own --cert/--key per server), a certificate per server naming its host as
written in --server, each server's configuration (server_name, cluster.name and
routes over mutual TLS, JetStream with its store and limits, max_payload 8MB,
monitoring on loopback), an operator, a system account and kusaw's account
with a signing key, preloaded in a memory resolver (resolver.conf), and
serve-cluster.yaml, the factory file's serve.cluster block. Route ports
default to each client port + 2000, monitoring ports to + 4000 (NATS's 4222,
6222, 8222). The seeds (*.nk, ca-key.pem, sys.creds) stay with you; only the
signing key goes to serve's secret store. A folder that holds a
configuration already is refused: new keys would shut out a running cluster.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if maxStore != "" {
				n, err := config.ParseSize(maxStore)
				if err != nil {
					return exitf(status.ExitUsage, "--max-file-store: %v (write it like 20G)", err)
				}
				o.MaxFileStore = n
			}
			r, err := natsconf.Write(o)
			if err != nil {
				return exitf(status.ExitUsage, "%v", err)
			}
			if jsonOut {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printNATSConfig(a, o, r)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Dir, "dir", "", "the folder to write into (made when missing)")
	f.StringArrayVar(&o.Servers, "server", nil, "a NATS server's client address as serve and the workers write it in their URLs, HOST:PORT (repeatable: 1, 3 or 5)")
	f.StringArrayVar(&o.Routes, "route", nil, "a server's route address HOST:PORT, once per --server in the same order (default: its host, client port + 2000)")
	f.IntSliceVar(&o.Monitor, "monitor-port", nil, "a server's monitoring port on 127.0.0.1, once per --server (default: client port + 4000)")
	f.StringVar(&o.InstallDir, "install-dir", "", "where the files will be on the NATS servers: the paths the configurations name (default: --dir)")
	f.StringVar(&o.StoreDir, "store-dir", "", "the JetStream stores' parent folder on the servers (default: INSTALL-DIR/jetstream)")
	f.StringVar(&maxStore, "max-file-store", "", "what each server's JetStream keeps on disk at most (default 16G; at least what kusaw's streams and one pool take, about 5.3G)")
	f.StringVar(&o.CACert, "ca-cert", "", "your own CA certificate (PEM): with --ca-key it signs the servers' certificates; with --cert it is the bundle they chain to")
	f.StringVar(&o.CAKey, "ca-key", "", "your own CA's key (PEM, ECDSA)")
	f.StringArrayVar(&o.Certs, "cert", nil, "your own server certificate (PEM), once per --server in the same order (with --key and --ca-cert)")
	f.StringArrayVar(&o.Keys, "key", nil, "your own server certificate's key (PEM), once per --server")
	f.BoolVar(&jsonOut, "json", false, "print what was written and what serve needs as JSON")
	return c
}

func printNATSConfig(a *app, o natsconf.Options, r *natsconf.Result) {
	dir, _ := filepath.Abs(o.Dir)
	inst := o.InstallDir
	if inst == "" {
		inst = dir
	}
	w := a.stdout
	fmt.Fprintf(w, "wrote the configuration of %d NATS server(s) to %s:\n  %s\n\n", r.Replicas, dir, strings.Join(r.Files, " "))
	fmt.Fprintf(w, "1. Start each server with its configuration (nats-server 2.10 or later, with the folder at %s on its machine):\n", inst)
	for _, n := range r.Names {
		fmt.Fprintf(w, "     nats-server -c %s\n", filepath.Join(inst, n+".conf"))
	}
	fmt.Fprintf(w, "   Each needs ca.pem, resolver.conf, operator.jwt and its own NAME.conf, NAME.pem, NAME-key.pem;\n")
	fmt.Fprintf(w, "   keep the seeds (*.nk, ca-key.pem, sys.creds) off the servers and safe.\n")
	fmt.Fprintf(w, "2. Add to factory.yaml (also in %s):\n\n", filepath.Join(dir, "serve-cluster.yaml"))
	for _, l := range strings.Split(strings.TrimRight(natsconf.ServeYAML(r, ""), "\n"), "\n") {
		fmt.Fprintf(w, "     %s\n", l)
	}
	fmt.Fprintf(w, "\n3. Give serve the account's signing key and the keys it revokes retired workers with, then remove the files:\n")
	fmt.Fprintf(w, "     kusaw config set serve.cluster.signing_key --secret < %s\n", r.SigningKeyFile)
	fmt.Fprintf(w, "     kusaw config set serve.cluster.system_key --secret < %s\n", r.SystemKeyFile)
	fmt.Fprintf(w, "     kusaw config set serve.cluster.operator_key --secret < %s\n", r.OperatorKeyFile)
	fmt.Fprintf(w, "4. Start kusaw serve; join workers with kusaw cluster token as usual.\n")
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
				switch {
				case w.Stopped:
					last += " (stopped)"
				case w.Lost:
					last += " (lost)"
				case w.Draining:
					last += " (draining)"
				}
				allowed := strings.Join(w.AllowedPools, ",")
				if allowed == enroll.AnyPool {
					allowed = "any"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", termSafe(w.Name), termSafe(strings.Join(w.Pools, ",")), termSafe(allowed), w.Running, w.MaxParallel, last, termSafe(w.Version))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	var timeout time.Duration
	drain := &cobra.Command{
		Use:   "drain NAME",
		Short: "make a worker take no new attempts and stop once its running ones ended (within its drain timeout; then they go to other workers, not counted against their steps)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := a.serveOnly()
			if err != nil {
				return err
			}
			if err := cl.DrainWorker(c.Context(), args[0], timeout); err != nil {
				return exitf(workerExit(err), "%v", err)
			}
			fmt.Fprintf(a.stdout, "worker %s drains: it takes no new attempts and stops once its running ones ended\n", args[0])
			return nil
		},
	}
	drain.Flags().DurationVar(&timeout, "timeout", 0, "how long its running attempts may still take (default: the worker's worker.drain_timeout)")
	retire := &cobra.Command{
		Use:   "retire NAME",
		Short: "remove a worker for good: its enrollment is revoked (it can no longer connect or take attempts), attempts it held go to other workers; its keys stay for kusaw log verify",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := a.serveOnly()
			if err != nil {
				return err
			}
			held, note, err := cl.RetireWorker(c.Context(), args[0])
			if err != nil {
				return exitf(workerExit(err), "%v", err)
			}
			fmt.Fprintf(a.stdout, "worker %s retired (%d attempt(s) it held go to other workers)\n", args[0], held)
			if note != "" {
				fmt.Fprintln(a.stderr, "note: "+note)
			}
			return nil
		},
	}
	cmd.AddCommand(drain, retire)
	return cmd
}

// workerExit is the exit code of a refused kusaw workers drain or retire:
// no such worker is bad input, anything else serve's answer.
func workerExit(err error) status.ExitCode {
	var ae *client.APIError
	if errors.As(err, &ae) && (ae.Status == 404 || ae.Status == 400) {
		return status.ExitUsage
	}
	return status.ExitServeUnavailable
}

func newWorkerCmd(a *app) *cobra.Command {
	var join, joinFile, name, stateDir string
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
			cfg, err := a.settings(c.Flags())
			if err != nil {
				return err
			}
			drainFor, err := time.ParseDuration(cfg.get("worker.drain_timeout"))
			if err != nil || drainFor <= 0 {
				return exitf(status.ExitUsage, "worker.drain_timeout %q (from %s) is not a duration: write it like 30s or 10m", cfg.get("worker.drain_timeout"), cfg.source["worker.drain_timeout"])
			}
			// The token also comes from a file or the environment: on the
			// command line every local user sees it (ps).
			if join == "" && joinFile != "" {
				b, err := os.ReadFile(joinFile)
				if err != nil {
					return exitf(status.ExitUsage, "--join-file: %v", err)
				}
				join = strings.TrimSpace(string(b))
			}
			if join == "" {
				join = strings.TrimSpace(os.Getenv("KUSAW_JOIN_TOKEN"))
			}
			// The daemon (kusaw-daemon) enrolls, drains on SIGTERM and runs
			// the attempts from here on, in this same process.
			return a.handOver(daemon.Spec{Command: "worker", Worker: &daemon.Worker{StateDir: stateDir, Name: name, Join: join,
				Pools: pools, PoolsSet: c.Flags().Changed("pool"), MaxParallel: maxParallel, MaxParallelSet: c.Flags().Changed("max-parallel"),
				DrainTimeout: drainFor}})
		},
	}
	cmd.Flags().StringVar(&join, "join", "", "enroll with a token from kusaw cluster token (the identity stays in --state-dir; a new token joins it again with that token's pools); --join-file or KUSAW_JOIN_TOKEN keep it off the command line")
	cmd.Flags().StringVar(&joinFile, "join-file", "", "read the join token from this file (or set KUSAW_JOIN_TOKEN)")
	cmd.Flags().StringVar(&name, "name", "", "the worker's name (default: the host name)")
	cmd.Flags().StringArrayVar(&pools, "pool", nil, "a pool to take attempts from, one its join token allows (repeatable; default: every pool the token allows)")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 1, "attempts at once (kept in --state-dir for the next start, like --pool)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "the worker's folder: identity, cache repositories, attempts (default ~/.local/state/kusaw-worker)")
	cmd.Flags().String("drain-timeout", "", "after SIGTERM or kusaw workers drain, how long running attempts may finish before they go back to serve (setting worker.drain_timeout; default 10m)")
	return cmd
}
