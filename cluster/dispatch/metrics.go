package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the cluster's Prometheus metrics (serve's /metrics).
type Metrics struct {
	QueueDepth      *prometheus.GaugeVec
	Running         *prometheus.GaugeVec
	DispatchLatency prometheus.Histogram
	Lost            prometheus.Counter
	Fenced          prometheus.Counter
	BundleBytes     *prometheus.CounterVec
	Connected       prometheus.Gauge
}

// NewMetrics registers the cluster's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kusaw_cluster_queue_depth", Help: "Attempts published to a pool and not yet claimed."}, []string{"pool"}),
		Running:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kusaw_cluster_attempts_running", Help: "Attempts a worker reports running."}, []string{"worker"}),
		DispatchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kusaw_cluster_dispatch_latency_seconds",
			Help: "From publishing an attempt to its process starting on a worker.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		Lost:        prometheus.NewCounter(prometheus.CounterOpts{Name: "kusaw_cluster_lost_attempts_total", Help: "Attempts whose worker stopped answering."}),
		Fenced:      prometheus.NewCounter(prometheus.CounterOpts{Name: "kusaw_cluster_fenced_results_total", Help: "Results refused for a stale fencing token."}),
		BundleBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kusaw_cluster_bundle_bytes_total", Help: "Bytes of git bundles, out to workers and in from them."}, []string{"direction"}),
		Connected:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "kusaw_cluster_connected", Help: "1 while serve is connected to its NATS server, 0 while it is not."}),
	}
	m.Connected.Set(1)
	reg.MustRegister(m.QueueDepth, m.Running, m.DispatchLatency, m.Lost, m.Fenced, m.BundleBytes, m.Connected)
	return m
}

// The helpers accept a nil *Metrics (no /metrics).

func (m *Metrics) queued(pool string, delta float64) {
	if m != nil {
		m.QueueDepth.WithLabelValues(pool).Add(delta)
	}
}

func (m *Metrics) running(worker string, n int) {
	if m != nil {
		m.Running.WithLabelValues(worker).Set(float64(n))
	}
}

func (m *Metrics) latency(d time.Duration) {
	if m != nil {
		m.DispatchLatency.Observe(d.Seconds())
	}
}

func (m *Metrics) bundle(dir string, n int64) {
	if m != nil {
		m.BundleBytes.WithLabelValues(dir).Add(float64(n))
	}
}

func (m *Metrics) lost() {
	if m != nil {
		m.Lost.Inc()
	}
}
