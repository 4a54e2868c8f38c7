// Package metrics holds the request-path Prometheus metrics of the sidecar:
// the vectors, registered once per process, and Child and Codes, with
// which the resolver and the proxy take their pool's children once
// instead of looking them up on every request. The label values (decisions, rebind
// reasons) belong to the packages that decide them. Packages with their
// own concerns (stores, jwtauth, discovery) register their own metrics on
// the same Registerer.
package metrics

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/buildinfo"
	"github.com/tetherproxy/tether/sidecar/usage"
)

// Metrics are the request-path metrics.
type Metrics struct {
	Requests       *prometheus.CounterVec // pool, decision, code, outcome
	ResponseBytes  *prometheus.CounterVec // pool
	Sessions       *prometheus.CounterVec // pool, result
	Rebinds        *prometheus.CounterVec // pool, reason
	AffinityBroken *prometheus.CounterVec // pool, reason
	StoreFallbacks *prometheus.CounterVec // pool, op
	Retries        *prometheus.CounterVec // pool, reason
	// PlacementsDiverted counts placements the cost policy sent to
	// another backend than the session key's.
	PlacementsDiverted *prometheus.CounterVec // pool
	// PlacementsPassedOver counts hashed placements whose key's first
	// choice a bound passed over.
	PlacementsPassedOver *prometheus.CounterVec   // pool, bound
	InFlight             *prometheus.GaugeVec     // pool
	UpstreamLatency      *prometheus.HistogramVec // pool: until response headers
	RequestDuration      *prometheus.HistogramVec // pool: whole request incl. streaming
	// Usage counts the prompt and cached tokens backends report.
	Usage *usage.Metrics
}

// latencyBuckets span a cached decode step (ms) to a long cold prefill (minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// New creates the metrics and registers them on reg, together with
// tether_build_info (see sidecar/buildinfo), so that every registry that
// serves the request path also names the build.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_requests_total",
			Help: "Requests, by pool, sticky decision, HTTP status code and outcome (completed, client_closed, upstream_reset, timeout).",
		}, []string{"pool", "decision", "code", "outcome"}),
		ResponseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_response_bytes_total",
			Help: "Response body bytes written to clients (streams included, however they ended).",
		}, []string{"pool"}),
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
			Help: "Requests retried on another backend because the first failed before any response byte, by reason (connect_failed, empty_response).",
		}, []string{"pool", "reason"}),
		PlacementsDiverted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_placements_diverted_total",
			Help: "Sessions placed (new, rebound or moved) on another backend than the one their key chose, because soft affinity's cost policy expected their first token sooner there (a shorter queue, or a backend whose requests are not late), by pool.",
		}, []string{"pool"}),
		PlacementsPassedOver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_placements_passed_over_total",
			Help: "Sessions placed (new or rebound) on another backend than their key's first choice because that backend was above a bound of hashed placement, by pool and bound (load: requests in flight; bindings: live sessions; work: request bytes sent recently).",
		}, []string{"pool", "bound"}),
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
	reg.MustRegister(m.Requests, m.ResponseBytes, m.Sessions, m.Rebinds, m.AffinityBroken, m.StoreFallbacks, m.Retries,
		m.PlacementsDiverted, m.PlacementsPassedOver, m.InFlight, m.UpstreamLatency, m.RequestDuration, buildinfo.Collector())
	m.Usage = usage.NewMetrics(reg)
	return m
}

// Child returns the child of a vector for fixed label values
// (vec.WithLabelValues as with), created on the first call and returned
// as it is on every later one. Built once per pool, it keeps label hashing
// and lookups off the request path, and, unlike resolving the child up
// front, exports a series only once it has something to count, as a
// lookup per request did (a hard-affinity pool has no broken-pin series).
func Child[T any](with func(...string) T, labelValues ...string) func() T {
	return sync.OnceValue(func() T { return with(labelValues...) })
}

// Codes are one pool's children of a counter vector labelled (pool,
// decision, code, outcome), such as tether_requests_total. A child is
// created the first time its decision, status code and outcome are
// counted and kept in a map that is replaced, never changed, so counting a
// request takes one atomic load and a map lookup: no label hashing, no
// lock, no allocation.
type Codes struct {
	vec  *prometheus.CounterVec
	pool string
	mu   sync.Mutex // serialises adding children
	m    atomic.Pointer[map[codeKey]prometheus.Counter]
}

type codeKey struct {
	decision string
	code     int
	outcome  string
}

// NewCodes returns pool's children of vec.
func NewCodes(vec *prometheus.CounterVec, pool string) *Codes {
	c := &Codes{vec: vec, pool: pool}
	c.m.Store(&map[codeKey]prometheus.Counter{})
	return c
}

// Inc counts one request of decision answered with code that ended with outcome.
func (c *Codes) Inc(decision string, code int, outcome string) {
	k := codeKey{decision, code, outcome}
	if ctr, ok := (*c.m.Load())[k]; ok {
		ctr.Inc()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.m.Load()
	ctr, ok := old[k]
	if !ok {
		ctr = c.vec.WithLabelValues(c.pool, decision, strconv.Itoa(code), outcome)
		next := make(map[codeKey]prometheus.Counter, len(old)+1)
		maps.Copy(next, old)
		next[k] = ctr
		c.m.Store(&next)
	}
	ctr.Inc()
}
