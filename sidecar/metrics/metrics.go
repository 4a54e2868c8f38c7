// Package metrics holds the request-path Prometheus metrics of the sidecar.
// Packages with their own concerns (stores, jwtauth, discovery) register
// their own metrics on the same Registerer; this one is what every request
// touches.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/buildinfo"
)

// Decisions of the sticky resolver, used as label values and in the access log.
const (
	DecisionHit    = "hit"    // the bound backend was selectable and used
	DecisionMiss   = "miss"   // no binding: a backend was chosen and bound
	DecisionRebind = "rebind" // the binding was stale: a new backend was bound
	DecisionNone   = "none"   // no session key (or no store): balanced, not bound
	DecisionBroken = "broken" // soft affinity broke an overloaded pin
)

// Metrics are the request-path metrics.
type Metrics struct {
	Requests        *prometheus.CounterVec   // pool, decision, code
	Sessions        *prometheus.CounterVec   // pool, result: hit|miss|rebind|broken
	Rebinds         *prometheus.CounterVec   // pool, reason
	AffinityBroken  *prometheus.CounterVec   // pool, reason
	StoreFallbacks  *prometheus.CounterVec   // pool, op
	Retries         *prometheus.CounterVec   // pool
	BackendFailures *prometheus.CounterVec   // pool
	InFlight        *prometheus.GaugeVec     // pool
	UpstreamLatency *prometheus.HistogramVec // pool: until response headers
	RequestDuration *prometheus.HistogramVec // pool: whole request incl. streaming
}

// Rebind reasons.
const (
	ReasonUnselectable  = "unselectable"   // the bound backend left the selectable set
	ReasonConnectFailed = "connect_failed" // the bound backend refused a connection
	ReasonOverload      = "overload"       // soft affinity
)

// latencyBuckets span a cached decode step (ms) to a long cold prefill (minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// New creates the metrics and registers them on reg, together with
// tether_build_info (see sidecar/buildinfo), so that every registry that
// serves the request path also names the build.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_requests_total",
			Help: "Requests proxied, by pool, sticky decision and HTTP status code.",
		}, []string{"pool", "decision", "code"}),
		Sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_session_lookups_total",
			Help: "Requests that carried a session key, by pool and result (hit, miss, rebind, broken).",
		}, []string{"pool", "result"}),
		Rebinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_session_rebinds_total",
			Help: "Sessions moved to another backend, by pool and reason.",
		}, []string{"pool", "reason"}),
		AffinityBroken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_affinity_broken_total",
			Help: "Pins broken by soft affinity (the session moved to a less loaded backend), by pool and reason.",
		}, []string{"pool", "reason"}),
		StoreFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_store_fallbacks_total",
			Help: "Requests balanced without stickiness because the store failed, by pool and operation.",
		}, []string{"pool", "op"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_upstream_retries_total",
			Help: "Requests retried on another backend after a connection failure.",
		}, []string{"pool"}),
		BackendFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_backend_failures_total",
			Help: "Backends marked failed (not selectable for proxy.failTimeout) after a connection failure.",
		}, []string{"pool"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_requests_in_flight",
			Help: "Requests being proxied now.",
		}, []string{"pool"}),
		UpstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_upstream_response_seconds",
			Help:    "Time from sending a request upstream to its response headers (prefill and queueing included).",
			Buckets: latencyBuckets,
		}, []string{"pool"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_request_duration_seconds",
			Help:    "Whole request duration through the sidecar, streaming included.",
			Buckets: latencyBuckets,
		}, []string{"pool"}),
	}
	reg.MustRegister(m.Requests, m.Sessions, m.Rebinds, m.AffinityBroken, m.StoreFallbacks, m.Retries,
		m.BackendFailures, m.InFlight, m.UpstreamLatency, m.RequestDuration, buildinfo.Collector())
	return m
}
