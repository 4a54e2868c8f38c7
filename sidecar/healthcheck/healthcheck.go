// Package healthcheck actively checks a pool's static backends, which no
// readiness probe watches: it GETs a path (vLLM's and SGLang's /health)
// on each backend every interval and publishes the backends that pass as
// the pool's discovery.Source. UnhealthyThreshold failures in a row take
// a backend out of the selectable set (its sessions rebind on their next
// turn, as when a pod turns NotReady), HealthyThreshold successes in a row
// bring it back. Unlike a pod's Ready transition, the moment a backend
// came back is this replica's own observation, so it does not mark a new
// life (Backend.Since stays zero): replicas would disagree on it.
package healthcheck

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
)

// Options configure a Checker.
type Options struct {
	// Backends are the configured backends (a static source).
	Backends discovery.Source
	Config   config.HealthCheck
	// Client sends the checks (a transport of its own, dialling only the
	// configured backends).
	Client *http.Client
	// Reg receives the metrics, labelled with the pool by the caller; nil:
	// unregistered.
	Reg prometheus.Registerer
	Log *slog.Logger
}

// Checker is a discovery.Source of the configured backends that pass
// their health checks.
type Checker struct {
	o      Options
	set    atomic.Pointer[discovery.Set]
	synced atomic.Bool
	// health is each backend's record, by ID; only Run's goroutine uses it.
	health map[string]*record

	checks    *prometheus.CounterVec // result
	unhealthy prometheus.Gauge
}

// record is one backend's recent results.
type record struct {
	healthy bool
	streak  int // results in a row that disagree with healthy
}

// New returns a Checker; Run checks.
func New(o Options) *Checker {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := &Checker{o: o, health: map[string]*record{},
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_health_checks_total",
			Help: "Active health checks of static backends, by result (success, failure).",
		}, []string{"result"}),
		unhealthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_backends_unhealthy",
			Help: "Static backends not selectable because they failed their health checks.",
		}),
	}
	if o.Reg != nil {
		o.Reg.MustRegister(c.checks, c.unhealthy)
	}
	return c
}

// Current is the set of configured backends that are healthy.
func (c *Checker) Current() *discovery.Set {
	if s := c.set.Load(); s != nil {
		return s
	}
	return discovery.NewSet(nil, nil)
}

// Synced reports whether every backend was checked once.
func (c *Checker) Synced() bool { return c.synced.Load() }

// Run checks every interval until ctx ends. The first round decides on
// one result each: a backend that answers is selectable from the start.
func (c *Checker) Run(ctx context.Context) error {
	c.round(ctx, true)
	c.synced.Store(true)
	t := time.NewTicker(c.o.Config.Interval.Duration)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.round(ctx, false)
		}
	}
}

// round checks every configured backend at once, applies the thresholds
// and publishes the healthy ones.
func (c *Checker) round(ctx context.Context, first bool) {
	backends := c.o.Backends.Current().Backends
	ok := make([]bool, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() { ok[i] = c.check(ctx, b) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // cut short by the shutdown: no verdict
	}
	live := make([]discovery.Backend, 0, len(backends))
	seen := make(map[string]bool, len(backends))
	for i, b := range backends {
		seen[b.ID] = true
		r := c.health[b.ID]
		if r == nil {
			r = &record{healthy: ok[i]}
			c.health[b.ID] = r
		}
		c.apply(b, r, ok[i], first)
		if r.healthy {
			live = append(live, b)
		}
	}
	for id := range c.health {
		if !seen[id] {
			delete(c.health, id)
		}
	}
	c.unhealthy.Set(float64(len(backends) - len(live)))
	c.set.Store(discovery.NewSet(live, nil))
}

// apply counts one result of b against the thresholds.
func (c *Checker) apply(b discovery.Backend, r *record, ok, first bool) {
	if first {
		r.healthy, r.streak = ok, 0
		if !ok {
			c.o.Log.Warn("backend fails its health check; not selectable", "backend", b.Name)
		}
		return
	}
	if ok == r.healthy {
		r.streak = 0
		return
	}
	r.streak++
	switch {
	case r.healthy && r.streak >= c.o.Config.UnhealthyThreshold:
		r.healthy, r.streak = false, 0
		c.o.Log.Warn("backend unhealthy; not selectable", "backend", b.Name, "failures", c.o.Config.UnhealthyThreshold)
	case !r.healthy && r.streak >= c.o.Config.HealthyThreshold:
		r.healthy, r.streak = true, 0
		c.o.Log.Info("backend healthy again; selectable", "backend", b.Name)
	}
}

// check GETs the health path of b once: a 2xx answer within the timeout
// passes.
func (c *Checker) check(ctx context.Context, b discovery.Backend) bool {
	ctx, cancel := context.WithTimeout(ctx, c.o.Config.Timeout.Duration)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.Addr+c.o.Config.Path, nil)
	if err != nil {
		return false
	}
	resp, err := c.o.Client.Do(req)
	pass := err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300
	if err == nil {
		io.CopyN(io.Discard, resp.Body, 4<<10) // small answers keep the connection
		resp.Body.Close()
	}
	result := "failure"
	if pass {
		result = "success"
	}
	c.checks.WithLabelValues(result).Inc()
	return pass
}
