package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/cluster/dispatch"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ClusterDir is serve's cluster folder under state_dir: the CA, serve's
// identity, enrolled workers, outstanding tokens and JetStream's store
// (hidden from every sandbox).
const ClusterDir = record.ClusterDir

// serveCluster is serve's side of the cluster (docs/cluster.md).
type serveCluster struct {
	srv    *cluster.Server
	d      *dispatch.Dispatcher
	reg    *prometheus.Registry
	cancel context.CancelFunc
}

// startCluster embeds the NATS server and the dispatcher when the factory
// has serve.cluster; the engine then hands the pools workers take to it.
func startCluster(f *config.Factory) (*serveCluster, error) {
	c := f.Serve.Cluster
	if c == nil {
		return nil, nil
	}
	if c.NatsURL != "" {
		return nil, errors.New("serve.cluster.nats_url: an external NATS cluster is not supported by this kusaw yet; use serve.cluster.listen (docs/cluster.md)")
	}
	dir := filepath.Join(f.StateDir, ClusterDir)
	srv, err := cluster.StartServer(cluster.ServerOptions{Dir: dir, Listen: c.Listen})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) (*serveCluster, error) {
		cancel()
		srv.Shutdown()
		return nil, err
	}
	nc, err := srv.ConnectInProcess("kusaw serve")
	if err != nil {
		return fail(err)
	}
	if err := srv.ServeEnrollments(ctx, nc); err != nil {
		return fail(err)
	}
	h, err := cluster.Setup(ctx, nc)
	if err != nil {
		return fail(err)
	}
	reg := prometheus.NewRegistry()
	d, err := dispatch.New(ctx, dispatch.Options{NC: nc, H: h, Identity: srv.Identity, Registry: srv.Registry, Dir: dir,
		LostAfter: c.LostAfter, LocalWorker: c.LocalWorker, Metrics: dispatch.NewMetrics(reg)})
	if err != nil {
		return fail(err)
	}
	return &serveCluster{srv: srv, d: d, reg: reg, cancel: cancel}, nil
}

func (c *serveCluster) close() {
	if c == nil {
		return
	}
	c.cancel()
	c.srv.Shutdown()
}

// clusterRoutes adds the cluster's endpoints:
//
//	POST /v1/cluster/token   a one-time join token
//	GET  /v1/workers         enrolled workers and their heartbeats
//	GET  /metrics            Prometheus metrics (cluster and queue)
func (s *Server) clusterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/cluster/token", s.apiClusterToken)
	mux.HandleFunc("GET /v1/workers", s.apiWorkers)
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
	tok, err := s.cl.srv.NewToken(addr)
	if err != nil {
		apiError(w, http.StatusConflict, "no_listener", err.Error(), "set serve.cluster.listen")
		return
	}
	writeJSONResponse(w, http.StatusCreated, client.ClusterToken{Token: tok.String(), Addr: tok.Addr, CA: tok.CA, Expires: cluster.TokenTTL.String()})
}

func (s *Server) apiWorkers(w http.ResponseWriter, r *http.Request) {
	if s.noCluster(w) {
		return
	}
	out := []client.Worker{}
	for _, ws := range s.cl.d.Workers() {
		out = append(out, client.Worker{Name: ws.Name, Pools: ws.Pools, Running: ws.Running, MaxParallel: ws.MaxParallel,
			Version: ws.Version, LastHeartbeat: ws.LastSeen, Lost: ws.Lost, Enrolled: ws.Enrolled})
	}
	writeJSONResponse(w, http.StatusOK, map[string]any{"workers": out})
}

func (s *Server) apiMetrics(w http.ResponseWriter, r *http.Request) {
	reg := prometheus.NewRegistry()
	q, running := s.Counts()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kusaw_runs_queued", Help: "Runs waiting in serve's queue."}, func() float64 { return float64(q) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kusaw_runs_running", Help: "Runs serve is running."}, func() float64 { return float64(running) }))
	gs := prometheus.Gatherers{reg}
	if s.cl != nil {
		gs = append(gs, s.cl.reg)
	}
	promhttp.HandlerFor(gs, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

// clusterAddr is where workers reach serve ("" without a cluster).
func (s *Server) clusterAddr() string {
	if s.cl == nil {
		return ""
	}
	return fmt.Sprint(s.cl.srv.Addr())
}
