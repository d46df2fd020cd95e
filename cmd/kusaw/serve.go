package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/internal/daemon"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

func init() { addCommand("serve", newServeCmd) }

func newServeCmd(a *app) *cobra.Command {
	var maxParallel int
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the daemon: a run queue, the HTTP API on a Unix socket in state_dir, and a web page of runs",
		Long: `kusaw serve runs queued runs with at most serve.max_parallel running at once
(a run has at most one attempt running, so this also bounds attempts), and
answers the HTTP API on state_dir/serve/serve.sock (mode 0600, hidden from
every sandbox, refusing any process in a sandbox). With serve.listen
(or --listen) it also listens on TCP; clients then send the bearer token
stored as serve.token (kusaw config set serve.token --secret), and the web
page opens at http://ADDR/?token=TOKEN.

API: GET /v1/health; POST /v1/runs {"pipeline","params"}; GET /v1/runs;
GET /v1/runs/ID; POST /v1/runs/ID/cancel; POST /v1/runs/ID/approve and
/reject {"step","reason"} (a run waiting at a gate); GET /v1/runs/ID/events (SSE);
GET /v1/runs/ID/log?path=steps/STEP/N/stdout.log&offset=0;
GET /v1/runs/ID/attempts/STEP/N/egress.

On SIGTERM or SIGINT serve takes no new runs, records queued runs as
interrupted, gives running attempts --grace to finish, then interrupts them
and records them interrupted. On start it finds runs a crash left running,
marks them interrupted and removes their worktrees; with serve.resume: true
it queues them again from their first step that did not pass.
Logs: JSON lines on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := a.settings(c.Flags())
			if err != nil {
				return err
			}
			f, err := a.loadFactory()
			if err != nil {
				return err
			}
			fp, err := filepath.Abs(f.Path)
			if err != nil {
				return exitf(status.ExitInternal, "%v", err)
			}
			spec := &daemon.Serve{Factory: fp, StateDir: f.StateDir, LogLevel: cfg.get("log_level"), LogFormat: cfg.get("log_format"),
				Color: useColor(cfg.get("color"), false), MaxParallel: maxParallel, Listen: cfg.get("listen"), Grace: grace}
			if v := os.Getenv(killGraceEnv); v != "" {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return exitf(status.ExitUsage, "%s=%q is not a duration (for example 10s)", killGraceEnv, v)
				}
				spec.KillGrace = d
			}
			if spec.Listen == "" {
				spec.Listen = f.Serve.Listen
			}
			if spec.Listen != "" {
				if spec.Token, err = serveToken(cfg); err != nil {
					return err
				}
				if spec.Token == "" {
					return exitf(status.ExitInvalidConfig, "listening on %s needs a token in the secret store: kusaw config set %s --secret (or the token_file setting)", spec.Listen, client.TokenSecretKey)
				}
			}
			// The daemon (kusaw-daemon) runs the queue, the API and the
			// engine from here on, in this same process.
			return a.handOver(daemon.Spec{Command: "serve", Serve: spec})
		},
	}
	// Their defaults live in the settings table (kusaw env shows them).
	cmd.Flags().String("log-level", "", "debug, info, warn or error (setting log_level; default info)")
	cmd.Flags().String("log-format", "", "json or text (setting log_format; default json)")
	cmd.Flags().String("listen", "", "also listen on this TCP address, with the token (setting listen; default serve.listen)")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 0, "attempts at once, across runs and within parallel groups and candidates (default serve.max_parallel, else the number of cores)")
	cmd.Flags().DurationVar(&grace, "grace", 30*time.Second, "on SIGTERM/SIGINT, how long running attempts may finish before they are interrupted")
	return cmd
}

// serveToken reads the TCP listener's token from the token_file setting,
// else from the secret store.
func serveToken(cfg *settings) (string, error) {
	if p := cfg.get("token_file"); p != "" {
		st, err := os.Stat(p)
		if err != nil {
			return "", exitf(status.ExitInvalidConfig, "token_file %s (from %s): %v", p, cfg.source["token_file"], err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return "", exitf(status.ExitInvalidConfig, "token_file %s can be read by others (mode %v); chmod 600 it", p, st.Mode().Perm())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return "", exitf(status.ExitInvalidConfig, "token_file %s: %v", p, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	store, err := secretstore.Open()
	if err != nil {
		return "", exitf(status.ExitInvalidConfig, "the secret store: %v", err)
	}
	t, _ := store.Get(client.TokenSecretKey)
	return t, nil
}

// serveClient returns a client of the factory's serve when one is up,
// else nil (the command works in-process). KUSAW_NO_SERVE=1 forces
// in-process.
func (a *app) serveClient(stateDir string) (*client.Client, error) {
	if os.Getenv("KUSAW_NO_SERVE") == "1" {
		return nil, nil
	}
	c, err := client.DialServe(stateDir)
	var ae *client.APIError
	if errors.As(err, &ae) {
		// serve is up and answered no (peer_refused: this process runs in
		// a sandbox, or serve cannot tell): working in-process beside it
		// would be wrong, so say so.
		return nil, exitf(status.ExitServeUnavailable, "kusaw serve for %s is running but refused this process: %s", stateDir, ae.Error())
	}
	if err != nil {
		return nil, nil
	}
	return c, nil
}

// openStore is openState, through serve when it is up.
func (a *app) openStore() (RunStore, error) {
	f, err := a.loadFactory()
	if err != nil {
		return nil, err
	}
	if c, err := a.serveClient(f.StateDir); c != nil || err != nil {
		return c, err
	}
	return a.openState()
}
