package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/dispatch"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// ClusterDir is serve's cluster folder under state_dir: the CA, serve's
// identity, enrolled workers, outstanding tokens and JetStream's store
// (hidden from every sandbox).
const ClusterDir = record.ClusterDir

// serveCluster is serve's side of the cluster (docs/cluster.md): on the
// embedded NATS server or on an existing NATS cluster.
type serveCluster struct {
	mu     sync.Mutex
	d      *dispatch.Dispatcher
	reg    *prometheus.Registry
	cancel context.CancelFunc
	// addr is where workers reach the cluster (the embedded server's
	// address, or nats_url).
	addr     string
	newToken func(addr string, g cluster.Grant) (cluster.Token, error)
	shutdown func()
	external bool // serve.cluster.nats_url
	// revoker, on an existing cluster with system_account, system_key and
	// operator_key, revokes retired workers' keys on the account; reg is
	// workers the registry they are in.
	revoker *cluster.Revoker
	workers *cluster.Registry
}

// startCluster starts the cluster's side of serve when the factory has
// serve.cluster: the embedded NATS server (listen) or a connection to an
// existing cluster (nats_url), then the dispatcher; the engine then hands
// the pools workers take to it.
func startCluster(f *config.Factory, log zerolog.Logger) (*serveCluster, error) {
	c := f.Serve.Cluster
	if c == nil {
		return nil, nil
	}
	dir := filepath.Join(f.StateDir, ClusterDir)
	ctx, cancel := context.WithCancel(context.Background())
	sc := &serveCluster{cancel: cancel}
	// Serve says when it loses NATS and when it is back; the dispatcher
	// finds no worker lost meanwhile.
	watch := []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			ev := log.Warn().Str("nats", cluster.Where(nc))
			if err != nil {
				ev = ev.Str("error", err.Error())
			}
			ev.Msg("disconnected from the NATS server: retrying; no worker is found lost until serve is back")
			if d := sc.dispatcher(); d != nil {
				d.ConnChanged(false)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("nats", cluster.Where(nc)).Msg("reconnected to the NATS server: workers have lost_after from now to be heard")
			if d := sc.dispatcher(); d != nil {
				d.ConnChanged(true)
			}
		}),
	}
	fail := func(err error) (*serveCluster, error) {
		sc.close()
		return nil, err
	}
	var nc *nats.Conn
	var disconnect func(string) int
	var id *cluster.Identity
	var reg *cluster.Registry
	if c.NatsURL != "" {
		x, rv, err := openExternal(dir, c)
		if err != nil {
			return fail(err)
		}
		sc.revoker = rv
		if nc, err = x.Connect("kusaw serve", watch...); err != nil {
			return fail(err)
		}
		sc.addr, sc.newToken, sc.shutdown, id, reg = c.NatsURL, x.NewToken, nc.Close, x.Identity, x.Registry
		sc.external = true
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		err = cluster.Preflight(pctx, nc, c.Replicas)
		pcancel()
		if err != nil {
			return fail(err)
		}
		if rv != nil {
			// Workers retired while the account could not be reached (or
			// before serve could revoke) are revoked now.
			if err := rv.RevokeRetired(ctx, x.Registry); err != nil {
				return fail(fmt.Errorf("cannot revoke the retired workers' keys on account %s: %v", c.Account, err))
			}
		}
		if err := x.ServeEnrollments(ctx, nc); err != nil {
			return fail(err)
		}
	} else {
		srv, err := cluster.StartServer(cluster.ServerOptions{Dir: dir, Listen: c.Listen})
		if err != nil {
			return fail(err)
		}
		sc.addr, sc.newToken, sc.shutdown, id, reg = srv.Addr(), srv.NewToken, srv.Shutdown, srv.Identity, srv.Registry
		disconnect = srv.Disconnect
		if nc, err = srv.ConnectInProcess("kusaw serve", watch...); err != nil {
			return fail(err)
		}
		if err := srv.ServeEnrollments(ctx, nc); err != nil {
			return fail(err)
		}
	}
	h, err := cluster.SetupReplicas(ctx, nc, c.Replicas)
	if err != nil {
		return fail(err)
	}
	sc.reg = prometheus.NewRegistry()
	sc.workers = reg
	d, err := dispatch.New(ctx, dispatch.Options{NC: nc, H: h, Identity: id, Registry: reg, Dir: dir,
		LostAfter: c.LostAfter, LocalWorker: c.LocalWorker, Metrics: dispatch.NewMetrics(sc.reg), AwaitSettle: true, Disconnect: disconnect})
	if err != nil {
		return fail(err)
	}
	sc.mu.Lock()
	sc.d = d
	sc.mu.Unlock()
	if !nc.IsConnected() {
		d.ConnChanged(false)
	}
	return sc, nil
}

// dispatcher is sc.d once it is made (nats.go's handlers may run before).
func (c *serveCluster) dispatcher() *dispatch.Dispatcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d
}

// openExternal reads what an existing NATS cluster needs: the account's
// signing seed from the secret store (never the factory file) and the
// CA bundle; with system_account, the revoker's seeds too.
func openExternal(dir string, c *config.Cluster) (*cluster.External, *cluster.Revoker, error) {
	if c.SigningKey == nil || c.Account == "" {
		return nil, nil, errors.New("nats_url needs account and signing_key (docs/cluster.md)")
	}
	st, err := secretstore.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("the secret store: %v", err)
	}
	seed, err := st.Get(c.SigningKey.Key)
	if err != nil || seed == "" {
		return nil, nil, fmt.Errorf("signing_key: secret %s is not in the secret store: store the account's signing seed (SA...) with kusaw config set %s --secret", c.SigningKey.Key, c.SigningKey.Key)
	}
	var caPEM []byte
	if c.CA != "" {
		if caPEM, err = os.ReadFile(c.CA); err != nil {
			return nil, nil, fmt.Errorf("ca: %v", err)
		}
	}
	x, err := cluster.OpenExternal(cluster.ExternalOptions{Dir: dir, URLs: c.NatsURL, Account: c.Account, SigningSeed: seed, CAPEM: caPEM})
	if err != nil || c.SystemAccount == "" || c.SystemKey == nil || c.OperatorKey == nil {
		return x, nil, err
	}
	seeds := map[string]string{}
	for name, ref := range map[string]*config.SecretRef{"system_key": c.SystemKey, "operator_key": c.OperatorKey} {
		v, err := st.Get(ref.Key)
		if err != nil || v == "" {
			return nil, nil, fmt.Errorf("%s: secret %s is not in the secret store: store its seed with kusaw config set %s --secret (kusaw cluster nats-config wrote it)", name, ref.Key, ref.Key)
		}
		seeds[name] = v
	}
	rv, err := cluster.NewRevoker(cluster.RevokerOptions{URLs: c.NatsURL, CAPEM: caPEM, Account: c.Account, SystemAccount: c.SystemAccount,
		SystemSeed: seeds["system_key"], OperatorSeed: seeds["operator_key"]})
	return x, rv, err
}

func (c *serveCluster) close() {
	if c == nil {
		return
	}
	c.cancel()
	if c.shutdown != nil {
		c.shutdown()
	}
}

// clusterRoutes adds the cluster's endpoints:
//
//	POST /v1/cluster/token   a one-time join token (?pool=P... or ?any_pool=true)
//	GET  /v1/workers         enrolled workers and their heartbeats
//	POST /v1/workers/{name}/drain   the worker takes no new attempts, finishes and stops (?timeout=10m)
//	POST /v1/workers/{name}/retire  the worker's enrollment is revoked
//	GET  /metrics            Prometheus metrics (cluster and queue)
func (s *Server) clusterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/cluster/token", s.apiClusterToken)
	mux.HandleFunc("GET /v1/workers", s.apiWorkers)
	mux.HandleFunc("POST /v1/workers/{name}/drain", s.apiWorkerDrain)
	mux.HandleFunc("POST /v1/workers/{name}/retire", s.apiWorkerRetire)
	mux.HandleFunc("GET /metrics", s.apiMetrics)
}

func (s *Server) noCluster(w http.ResponseWriter) bool {
	if s.cl != nil {
		return false
	}
	apiError(w, http.StatusConflict, "no_cluster", "this serve runs no cluster", "add serve.cluster.listen to the factory file and restart kusaw serve (docs/cluster.md)")
	return true
}

func (s *Server) apiClusterToken(w http.ResponseWriter, r *http.Request) {
	if s.noCluster(w) {
		return
	}
	addr := r.URL.Query().Get("addr")
	g, err := cluster.Grant{Pools: r.URL.Query()["pool"], AnyPool: r.URL.Query().Get("any_pool") == "true"}.Normal()
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_pool", err.Error(), "name pools with letters, digits, - and _; --any-pool alone")
		return
	}
	tok, err := s.cl.newToken(addr, g)
	if err != nil {
		apiError(w, http.StatusConflict, "no_listener", err.Error(), "set serve.cluster.listen")
		return
	}
	where := tok.Addr
	if where == "" {
		where = tok.URLs
	}
	writeJSONResponse(w, http.StatusCreated, client.ClusterToken{Token: tok.String(), Addr: where, CA: tok.CA, Expires: cluster.TokenTTL.String(),
		Pools: g.Pools, AnyPool: g.AnyPool})
}

func (s *Server) apiWorkers(w http.ResponseWriter, r *http.Request) {
	if s.noCluster(w) {
		return
	}
	out := []client.Worker{}
	for _, ws := range s.cl.d.Workers() {
		out = append(out, client.Worker{Name: ws.Name, Pools: ws.Pools, AllowedPools: ws.Allowed, Running: ws.Running, MaxParallel: ws.MaxParallel,
			Version: ws.Version, LastHeartbeat: ws.LastSeen, Lost: ws.Lost, Draining: ws.Draining, Stopped: ws.Stopped, Enrolled: ws.Enrolled})
	}
	writeJSONResponse(w, http.StatusOK, map[string]any{"workers": out})
}

func (s *Server) apiWorkerDrain(w http.ResponseWriter, r *http.Request) {
	if s.noCluster(w) {
		return
	}
	name := r.PathValue("name")
	var timeout time.Duration
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			apiError(w, http.StatusBadRequest, "bad_timeout", fmt.Sprintf("timeout %q is not a duration", v), "write it like 30s or 10m")
			return
		}
		timeout = d
	}
	if err := s.cl.d.Drain(r.Context(), name, timeout); err != nil {
		code := http.StatusConflict
		if errors.Is(err, dispatch.ErrNoWorker) {
			code = http.StatusNotFound
		}
		apiError(w, code, "cannot_drain", err.Error(), "kusaw workers lists the workers and whether they are connected")
		return
	}
	s.log.Info().Str("worker", name).Msg("worker draining: it takes no new attempts and stops once its running ones ended")
	writeJSONResponse(w, http.StatusAccepted, map[string]any{"worker": name, "draining": true})
}

func (s *Server) apiWorkerRetire(w http.ResponseWriter, r *http.Request) {
	if s.noCluster(w) {
		return
	}
	name := r.PathValue("name")
	held, err := s.cl.d.Retire(r.Context(), name)
	again := false
	if err != nil {
		// Retired already: on an existing cluster, its revocation may be
		// what failed last time; try it again.
		e := s.cl.workers.Known(name)
		if s.cl.revoker == nil || e == nil || e.Retired == nil {
			apiError(w, http.StatusNotFound, "no_worker", err.Error(), "kusaw workers lists the enrolled workers")
			return
		}
		again = true
	} else {
		s.log.Info().Str("worker", name).Int("attempts_lost", held).Msg("worker retired: its enrollment is revoked; attempts it held go to other workers")
	}
	out := map[string]any{"worker": name, "retired": true, "attempts_lost": held}
	switch {
	case s.cl.revoker != nil:
		e := s.cl.workers.Known(name)
		// Every retired key, not only this one (RevokeRetired).
		if err := s.cl.revoker.RevokeRetired(r.Context(), s.cl.workers); err != nil {
			s.log.Error().Str("worker", name).Str("error", err.Error()).Msg("worker retired on serve, but its key is not revoked on the NATS account")
			apiError(w, http.StatusBadGateway, "not_revoked", fmt.Sprintf("worker %s is retired on serve (it refuses everything from it), but its user key is not revoked on the NATS account: %v", name, err),
				"fix what the message says, then run kusaw workers retire "+name+" again (serve also tries at each start)")
			return
		}
		s.log.Info().Str("worker", name).Str("nkey", e.NKey).Msg("worker's user key revoked on the NATS account: the servers closed its connections and refuse it")
		out["revoked"] = true
		if again {
			out["note"] = "it was retired already; its user key is revoked on the NATS account"
		}
	case s.cl.external:
		out["note"] = "on an existing NATS cluster serve refuses everything from the worker, but without serve.cluster.system_account, system_key and operator_key it cannot revoke its user key on the account: revoke it there (nsc revocations add-user), or give serve those keys (docs/cluster.md)"
	}
	writeJSONResponse(w, http.StatusOK, out)
}

func (s *Server) apiMetrics(w http.ResponseWriter, r *http.Request) {
	reg := prometheus.NewRegistry()
	q, running := s.Counts()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kusaw_runs_queued", Help: "Runs waiting in serve's queue."}, func() float64 { return float64(q) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kusaw_runs_running", Help: "Runs serve is running."}, func() float64 { return float64(running) }))
	reg.MustRegister(s.intake.hooks)
	gs := prometheus.Gatherers{reg}
	if s.cl != nil {
		ch := s.clusterHealth()
		for state, n := range map[string]int{"up": ch.WorkersUp, "lost": ch.WorkersLost, "draining": ch.WorkersDraining, "stopped": ch.WorkersStopped} {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kusaw_cluster_workers", Help: "Enrolled workers by state: up (heard within lost_after), lost, draining, stopped.",
				ConstLabels: prometheus.Labels{"state": state}}, func() float64 { return float64(n) }))
		}
		gs = append(gs, s.cl.reg)
	}
	promhttp.HandlerFor(gs, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

// clusterHealth is the cluster's part of /v1/health (nil without one).
func (s *Server) clusterHealth() *client.ClusterHealth {
	if s.cl == nil {
		return nil
	}
	up, since, n := s.cl.d.Connection()
	h := &client.ClusterHealth{Connected: up, Disconnects: n, NATS: s.cl.addr}
	if !up {
		h.DisconnectedSince = &since
	}
	for _, w := range s.cl.d.Workers() {
		switch {
		case w.Stopped:
			h.WorkersStopped++
		case w.Lost:
			h.WorkersLost++
		case w.Draining:
			h.WorkersDraining++
		default:
			h.WorkersUp++
		}
	}
	return h
}

// clusterAddr is where workers reach serve ("" without a cluster).
func (s *Server) clusterAddr() string {
	if s.cl == nil {
		return ""
	}
	return s.cl.addr
}
