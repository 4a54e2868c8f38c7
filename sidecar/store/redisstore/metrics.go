package redisstore

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

const backend = "redis"

// Operation names, the op label of the metrics.
const (
	opLookup = "lookup"
	opCreate = "create"
	opDelete = "delete"
	opPeek   = "peek"
)

type metrics struct {
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	open     prometheus.Gauge
}

// newMetrics registers the store's metrics on reg. The names are shared
// with the other store backends (label backend), so a collector someone
// registered first is reused instead of failing.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_store_errors_total",
		Help: "Store operations that failed (the request was balanced without stickiness), by backend and operation.",
	}, []string{"backend", "op"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tether_store_op_duration_seconds",
		Help:    "Latency of store operations that reached the backend, by backend and operation.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
	}, []string{"backend", "op"})
	open := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tether_store_breaker_open",
		Help: "1 while the store's circuit breaker refuses calls (the backend failed repeatedly), else 0.",
	}, []string{"backend"})
	if reg != nil {
		var err error
		if errs, err = register(reg, errs); err != nil {
			return nil, err
		}
		if dur, err = register(reg, dur); err != nil {
			return nil, err
		}
		if open, err = register(reg, open); err != nil {
			return nil, err
		}
	}
	m := &metrics{errors: errs, duration: dur, open: open.WithLabelValues(backend)}
	for _, op := range []string{opLookup, opCreate, opDelete, opPeek} {
		m.errors.WithLabelValues(backend, op) // export zeros: rate() needs a start
	}
	m.open.Set(0)
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
