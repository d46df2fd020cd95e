package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/serve/unit"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("service", newServiceCmd) }

func newServiceCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "service", Short: "is kusaw serve running; install or remove it as a user service"}
	c.AddCommand(newServiceStatusCmd(a), newServiceInstallCmd(a, true), newServiceInstallCmd(a, false))
	return c
}

// serviceStatus is kusaw service status --json.
type serviceStatus struct {
	Serve struct {
		Running     bool   `json:"running"`
		Socket      string `json:"socket"`
		PID         int    `json:"pid,omitempty"`
		Listen      string `json:"listen,omitempty"`
		Queued      int    `json:"queued"`
		RunningRuns int    `json:"running_runs"`
		MaxParallel int    `json:"max_parallel,omitempty"`
		Error       string `json:"error,omitempty"`
		// Cluster: serve's connection to NATS and its workers.
		Cluster *client.ClusterHealth `json:"cluster,omitempty"`
		// State: does the state folder take writes (serve's write test).
		State *client.StateHealth `json:"state,omitempty"`
	} `json:"serve"`
	Sandbox sandbox.CheckResult `json:"sandbox"`
}

func newServiceStatusCmd(a *app) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "is kusaw serve running (socket, queue, state folder) and can this machine run the sandbox backend",
		Long: `Exit status: 0 serve is running and the sandbox backend is available;
6 serve is not running, it runs a cluster and is not connected to its
NATS server, or its state folder takes no writes (full, or read-only:
the folder and the fix are printed); 4 serve is running but the sandbox
backend is not available (the reason and fix are printed).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return a.serviceStatus(jsonOut) },
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the status as JSON")
	return cmd
}

// serviceStatus is kusaw service status: what serve's health says, the
// sandbox check, printed as text or JSON, and the exit code they give.
func (a *app) serviceStatus(jsonOut bool) error {
	f, err := a.loadFactory()
	if err != nil {
		return err
	}
	st := readServiceStatus(f.StateDir)
	newPrinter(a.stdout, jsonOut, printServiceStatus).Print(st)
	return st.exit()
}

// readServiceStatus asks the state folder's serve for its health.
func readServiceStatus(stateDir string) *serviceStatus {
	st := &serviceStatus{}
	st.Serve.Socket = filepath.Join(stateDir, record.ServeSocketFile)
	if os.Getenv("KUSAW_NO_SERVE") != "1" {
		cl, derr := client.DialServe(stateDir)
		if derr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			h, herr := cl.Health(ctx)
			cancel()
			if herr == nil {
				st.Serve.Running, st.Serve.PID, st.Serve.Queued, st.Serve.RunningRuns, st.Serve.MaxParallel = true, h.PID, h.Queued, h.Running, h.MaxParallel
				st.Serve.Cluster, st.Serve.State = h.Cluster, h.State
				var info client.ServeInfo
				if b, err := os.ReadFile(filepath.Join(stateDir, record.ServeInfoFile)); err == nil && json.Unmarshal(b, &info) == nil {
					st.Serve.Listen = info.Listen
				}
			} else {
				derr = herr
			}
		}
		if derr != nil && !errors.Is(derr, client.ErrServeDown) {
			st.Serve.Error = derr.Error()
		}
	}
	st.Sandbox = sandboxCheck()
	return st
}

// exit is kusaw service status's exit code for st.
func (st *serviceStatus) exit() error {
	switch {
	case !st.Serve.Running:
		return silentExit(status.ExitServeUnavailable)
	case st.Serve.Cluster != nil && !st.Serve.Cluster.Connected:
		return silentExit(status.ExitServeUnavailable)
	case st.Serve.State != nil && !st.Serve.State.Writable:
		return silentExit(status.ExitServeUnavailable)
	case !st.Sandbox.Available:
		return silentExit(status.ExitSandboxUnavailable)
	}
	return nil
}

// printServiceStatus is kusaw service status's text.
func printServiceStatus(w io.Writer, st *serviceStatus) {
	if st.Serve.Running {
		fmt.Fprintf(w, "serve:     running (pid %d)\n", st.Serve.PID)
		fmt.Fprintf(w, "socket:    %s\n", st.Serve.Socket)
		if st.Serve.Listen != "" {
			fmt.Fprintf(w, "listen:    %s (bearer token: %s in the secret store)\n", st.Serve.Listen, client.TokenSecretKey)
		}
		fmt.Fprintf(w, "queue:     %d queued, %d running, at most %d at once\n", st.Serve.Queued, st.Serve.RunningRuns, st.Serve.MaxParallel)
		if sh := st.Serve.State; sh != nil {
			if sh.Writable {
				fmt.Fprintf(w, "state:     %s writable\n", sh.Dir)
			} else {
				since := ""
				if sh.Since != nil {
					since = " since " + sh.Since.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "state:     %s FULL or not writable%s; attempts fail with %s until it takes writes again\n", sh.Dir, since, sh.Reason)
				fmt.Fprintf(w, "error:     %s\n", safeFor(w, sh.Message))
				fmt.Fprintf(w, "fix:       %s\n", sh.Fix)
			}
		}
		if ch := st.Serve.Cluster; ch != nil {
			workers := fmt.Sprintf("%d up, %d lost, %d draining, %d stopped", ch.WorkersUp, ch.WorkersLost, ch.WorkersDraining, ch.WorkersStopped)
			if ch.Connected {
				fmt.Fprintf(w, "cluster:   connected to NATS (%s); workers %s\n", ch.NATS, workers)
			} else {
				fmt.Fprintf(w, "cluster:   NOT connected to NATS (%s) since %s; serve retries, and finds no worker lost meanwhile\n", ch.NATS, ch.DisconnectedSince.Local().Format(time.RFC3339))
				fmt.Fprintf(w, "fix:       start the NATS server, or check the network between serve and it\n")
			}
		}
	} else {
		fmt.Fprintf(w, "serve:     not running (no answer on %s)\n", st.Serve.Socket)
		if st.Serve.Error != "" {
			fmt.Fprintf(w, "error:     %s\n", st.Serve.Error)
		}
		fmt.Fprintf(w, "fix:       start it: kusaw serve (or install it: kusaw service install)\n")
	}
	fmt.Fprintf(w, "backend:   %s", orNone(st.Sandbox.Backend))
	if st.Sandbox.Available {
		fmt.Fprintf(w, " available\n")
	} else {
		fmt.Fprintf(w, " NOT available\nreason:    %s: %s\nfix:       %s\n", st.Sandbox.Reason, st.Sandbox.Msg, st.Sandbox.Fix)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func newServiceInstallCmd(a *app, install bool) *cobra.Command {
	use, short := "install", "write a user service that runs kusaw serve for this factory (systemd user unit on Linux, launchd agent on macOS) and print it"
	if !install {
		use, short = "uninstall", "remove the user service kusaw service install wrote"
	}
	var asWorker bool
	var workerState string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.
The file is written, not started: the commands that start (or stop) it are
printed. The service runs the kusaw binary at its current path with -f and
the factory file's absolute path. With --worker it runs kusaw worker with
--state-dir instead (join it once first: kusaw worker --join-file FILE
--state-dir DIR); stopping that service drains the worker.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return a.serviceInstall(install, asWorker, workerState) },
	}
	cmd.Flags().BoolVar(&asWorker, "worker", false, "the service of a kusaw worker (its stop drains) instead of kusaw serve's")
	cmd.Flags().StringVar(&workerState, "state-dir", "", "with --worker: the worker's folder (default ~/.local/state/kusaw-worker)")
	return cmd
}

// serviceInstall is kusaw service install (and uninstall): the unit of
// serve for this factory, or of a worker, written (or removed) and the
// commands that start (or stop) it printed.
func (a *app) serviceInstall(install, asWorker bool, workerState string) error {
	var f *config.Factory
	var err error
	if !asWorker {
		if f, err = a.loadFactory(); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return exitf(status.ExitInternal, "cannot find the kusaw binary: %v", err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return exitf(status.ExitInternal, "cannot find the home folder: %v (set HOME)", err)
	}
	var u *unit.Unit
	if asWorker {
		if workerState == "" {
			workerState = filepath.Join(home, ".local", "state", "kusaw-worker")
		}
		workerState, _ = filepath.Abs(workerState)
		cfg, err := a.settings(nil)
		if err != nil {
			return err
		}
		drain, err := time.ParseDuration(cfg.get("worker.drain_timeout"))
		if err != nil || drain <= 0 {
			return exitf(status.ExitUsage, "worker.drain_timeout %q (from %s) is not a duration: write it like 30s or 10m", cfg.get("worker.drain_timeout"), cfg.source["worker.drain_timeout"])
		}
		u, err = unit.NewWorker(runtime.GOOS, exe, workerState, home, os.Getenv("XDG_CONFIG_HOME"), drain)
		if err != nil {
			return exitf(status.ExitUsage, "%v", err)
		}
	} else {
		fp, _ := filepath.Abs(f.Path)
		u, err = unit.NewServe(runtime.GOOS, exe, fp, f.StateDir, home, os.Getenv("XDG_CONFIG_HOME"))
		if err != nil {
			return exitf(status.ExitUsage, "%v", err)
		}
	}
	if !install {
		if err := os.Remove(u.Path); errors.Is(err, os.ErrNotExist) {
			return exitf(status.ExitNotFound, "no %s service for this factory at %s", u.Kind, u.Path)
		} else if err != nil {
			return exitf(status.ExitInternal, "%v", err)
		}
		fmt.Fprintf(a.stdout, "removed %s\nif it is running, stop it first or now:\n", u.Path)
		for _, c := range u.Disable {
			fmt.Fprintf(a.stdout, "  %s\n", c)
		}
		return nil
	}
	if err := u.Write(); err != nil {
		return exitf(status.ExitInternal, "cannot write %s: %v", u.Path, err)
	}
	fmt.Fprintf(a.stdout, "wrote %s (%s %s):\n\n%s\nstart it with:\n", u.Path, u.Kind, u.Name, u.Content)
	for _, c := range u.Enable {
		fmt.Fprintf(a.stdout, "  %s\n", c)
	}
	return nil
}
