// Package outlier is passive outlier detection for one pool: it learns
// from the results of real requests which backends fail and ejects them
// (makes them unselectable) for a while, as Envoy's outlier detection
// does. A refused connection ejects at once; ConsecutiveFailures other
// failures in a row (a reset connection, a first-byte timeout, a 5xx
// response) eject too. An ejection lasts BaseEjectionTime times the
// number of times the backend was ejected, at most MaxEjectionTime; every
// BaseEjectionTime a returned backend goes without an ejection forgives
// one. At most MaxEjectionPercent of the pool is ejected at once (one
// backend always may be), so a pool-wide problem does not empty the pool.
//
// A nil *Detector ejects nothing: outlier detection switched off.
package outlier

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
)

// Kind is a kind of failure: the kind label of
// tether_backend_failures_total and what the access log reports.
type Kind string

// Failure kinds.
const (
	// ConnectFailed: no connection (refused, unreachable, dial timeout).
	// It ejects at once: nothing listens there.
	ConnectFailed Kind = "connect_failed"
	// EmptyResponse: a reused keep-alive connection was closed or reset
	// before any response byte (the backend went away, or closed the
	// idle connection as the request was sent).
	EmptyResponse Kind = "empty_response"
	// Reset: the connection broke before or while the response came.
	Reset Kind = "reset"
	// Timeout: no response headers within the first-byte timeout.
	Timeout Kind = "timeout"
	// StreamIdle: the backend took no byte of the request, or sent none
	// of its response body after the headers, for the stream idle
	// timeout (a worker hung mid-stream).
	StreamIdle Kind = "stream_idle"
	// ServerError: a 5xx response.
	ServerError Kind = "5xx"
)

// Kinds lists every Kind (metric children are taken once for each).
var Kinds = []Kind{ConnectFailed, EmptyResponse, Reset, Timeout, StreamIdle, ServerError}

// Ejection reasons: the reason label of tether_backend_ejections_total.
const (
	ReasonConnectFailed       = "connect_failed"
	ReasonConsecutiveFailures = "consecutive_failures"
)

// Options configure a Detector.
type Options struct {
	Pool   string
	Config config.OutlierDetection
	// Size is the number of backends in the pool now (the base of
	// MaxEjectionPercent).
	Size func() int
	// Reg receives the detector's metrics; nil: unregistered.
	Reg prometheus.Registerer
	Now func() time.Time
	Log *slog.Logger
}

// Detector tracks one pool's backends. It is safe for concurrent use.
type Detector struct {
	cfg  config.OutlierDetection
	size func() int
	now  func() time.Time
	log  *slog.Logger
	m    detectorMetrics

	// ejected maps a backend ID to the end of its ejection. It is
	// replaced, never changed (ejections are rare, lookups are on every
	// request), so Ejected takes one atomic load.
	ejected atomic.Pointer[map[string]time.Time]
	// streaks counts backends with failures since their last success, so
	// that Success, on every request, returns at once while none fails.
	streaks atomic.Int64

	mu    sync.Mutex
	hosts map[string]*host // backends with failures or an ejection history
}

// host is one backend's record.
type host struct {
	streak    int       // failures since the last success
	ejections int       // times ejected, less the ones forgiven
	back      time.Time // when the last ejection ended (zero: never ejected)
}

type detectorMetrics struct {
	ejections map[string]prometheus.Counter // by reason
	skipped   prometheus.Counter
	failures  map[Kind]prometheus.Counter
}

// New returns the detector of a pool, or nil when cfg switches ejection off.
func New(o Options) *Detector {
	if !o.Config.On() {
		return nil
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	d := &Detector{cfg: o.Config, size: o.Size, now: o.Now, log: o.Log, hosts: map[string]*host{}}
	d.ejected.Store(&map[string]time.Time{})
	d.m = newMetrics(o.Reg, o.Pool, d.count)
	return d
}

func newMetrics(reg prometheus.Registerer, pool string, ejected func() float64) detectorMetrics {
	labels := prometheus.Labels{"pool": pool}
	ejections := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_backend_ejections_total", ConstLabels: labels,
		Help: "Backends ejected by outlier detection, by reason (connect_failed, consecutive_failures).",
	}, []string{"reason"})
	skipped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_backend_ejections_skipped_total", ConstLabels: labels,
		Help: "Ejections not made because outlierDetection.maxEjectionPercent of the pool was ejected already.",
	})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_backend_failures_total", ConstLabels: labels,
		Help: "Failed upstream requests counted by outlier detection, by kind (connect_failed, empty_response, reset, timeout, stream_idle, 5xx).",
	}, []string{"kind"})
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tether_backends_ejected", ConstLabels: labels,
		Help: "Backends of the pool ejected by outlier detection now.",
	}, ejected)
	if reg != nil {
		reg.MustRegister(ejections, skipped, failures, gauge)
	}
	m := detectorMetrics{
		ejections: map[string]prometheus.Counter{},
		skipped:   skipped,
		failures:  map[Kind]prometheus.Counter{},
	}
	for _, r := range []string{ReasonConnectFailed, ReasonConsecutiveFailures} {
		m.ejections[r] = ejections.WithLabelValues(r)
	}
	for _, k := range Kinds {
		m.failures[k] = failures.WithLabelValues(string(k))
	}
	return m
}

// Ejected reports whether backend id is ejected now.
func (d *Detector) Ejected(id string) bool {
	if d == nil {
		return false
	}
	m := *d.ejected.Load()
	if len(m) == 0 {
		return false
	}
	until, ok := m[id]
	return ok && d.now().Before(until)
}

// Failing reports whether backend id failed since its last success and
// was not ejected for it (yet): a retry should go elsewhere if it can.
func (d *Detector) Failing(id string) bool {
	if d == nil || d.streaks.Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.hosts[id]
	return h != nil && h.streak > 0
}

// Success records a request that backend id answered (below 500) and
// ended its failure streak.
func (d *Detector) Success(id string) {
	if d == nil || d.streaks.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.hosts[id]; h != nil && h.streak > 0 {
		h.streak = 0
		d.streaks.Add(-1)
		if h.back.IsZero() {
			delete(d.hosts, id) // nothing left to remember
		}
	}
}

// Failure records a failed request to backend id and reports whether the
// backend is ejected now (by this failure or before).
func (d *Detector) Failure(id string, k Kind) bool {
	if d == nil {
		return false
	}
	d.m.failures[k].Inc()
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	ejected := *d.ejected.Load()
	if until, ok := ejected[id]; ok && now.Before(until) {
		return true // a request that was in flight when it was ejected
	}
	h := d.hosts[id]
	if h == nil {
		h = &host{}
		d.hosts[id] = h
	}
	if h.streak == 0 {
		d.streaks.Add(1)
	}
	h.streak++
	reason := ""
	switch {
	case k == ConnectFailed:
		reason = ReasonConnectFailed
	case h.streak >= d.cfg.ConsecutiveFailures:
		reason = ReasonConsecutiveFailures
	default:
		return false
	}
	if !d.room(ejected, now) {
		d.m.skipped.Inc()
		return false
	}
	d.eject(id, h, ejected, now, reason)
	return true
}

// room reports whether one more backend may be ejected: fewer than
// MaxEjectionPercent of the pool are ejected now, and at least one
// always may be.
func (d *Detector) room(ejected map[string]time.Time, now time.Time) bool {
	n := 0
	for _, until := range ejected {
		if now.Before(until) {
			n++
		}
	}
	allowed := 1
	if d.size != nil {
		allowed = max(1, d.size()*d.cfg.MaxEjectionPercent/100)
	}
	return n < allowed
}

// eject takes id out for BaseEjectionTime times its ejections (one
// forgiven for every BaseEjectionTime since it came back), at most
// MaxEjectionTime. The caller holds mu.
func (d *Detector) eject(id string, h *host, ejected map[string]time.Time, now time.Time, reason string) {
	base := d.cfg.BaseEjectionTime.Duration
	if !h.back.IsZero() {
		h.ejections = max(0, h.ejections-int(now.Sub(h.back)/base))
	}
	h.ejections++
	h.streak = 0
	d.streaks.Add(-1)
	dur := min(base*time.Duration(h.ejections), d.cfg.MaxEjectionTime.Duration)
	until := now.Add(dur)
	h.back = until

	next := make(map[string]time.Time, len(ejected)+1)
	for k, u := range ejected {
		if now.Before(u) { // drop ended ejections as we go
			next[k] = u
		}
	}
	next[id] = until
	d.ejected.Store(&next)
	d.forget(now)
	d.m.ejections[reason].Inc()
	d.log.Warn("backend ejected", "backend", id, "reason", reason, "for", dur, "ejections", h.ejections)
}

// forget drops the records of backends that neither fail nor have an
// ejection left to remember, so backends that came and went (pods) do not
// pile up. The caller holds mu.
func (d *Detector) forget(now time.Time) {
	base := d.cfg.BaseEjectionTime.Duration
	for id, h := range d.hosts {
		if h.streak == 0 && (h.back.IsZero() || now.Sub(h.back) >= base*time.Duration(h.ejections)) {
			delete(d.hosts, id)
		}
	}
}

// count is the number of backends ejected now (the gauge).
func (d *Detector) count() float64 {
	now := d.now()
	n := 0
	for _, until := range *d.ejected.Load() {
		if now.Before(until) {
			n++
		}
	}
	return float64(n)
}
