package modelserver

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Results of applying a version of the object (the result label).
const (
	eventApplied = "applied"
	eventInvalid = "invalid"
	eventDeleted = "deleted"
)

// sourceMetrics: the selectable pods of the applied version (the same
// tether_backends_selectable series kubernetes discovery exports, by
// role), whether the pool has a usable definition, and what became of
// each version of the object.
type sourceMetrics struct {
	available prometheus.Gauge
	updates   *prometheus.CounterVec
}

var selectableDesc = prometheus.NewDesc("tether_backends_selectable",
	"Model-server pods that are selectable now (IP, Running, Ready, not terminating), by role.", []string{"role"}, nil)

func (m *sourceMetrics) register(reg prometheus.Registerer, s *Source) error {
	m.available = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tether_model_server_available",
		Help: "1 when the pool's ModelServer exists and is valid, 0 while the pool answers 503.",
	})
	m.updates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_model_server_updates_total",
		Help: "Versions of the pool's ModelServer seen, by result: applied, invalid (refused), deleted.",
	}, []string{"result"})
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{m.available, m.updates, selectable{s}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *sourceMetrics) event(result string) { m.updates.WithLabelValues(result).Inc() }

func (m *sourceMetrics) setAvailable(ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.available.Set(v)
}

// selectable reports the applied version's pods by role: backend for a
// plain pool, prefill and decode for a PD pool (pdGroup).
type selectable struct{ s *Source }

func (c selectable) Describe(ch chan<- *prometheus.Desc) { ch <- selectableDesc }

func (c selectable) Collect(ch chan<- prometheus.Metric) {
	st := c.s.state.Load()
	if st.def == nil {
		return
	}
	set := c.s.Current()
	if st.def.Backends.Kubernetes != nil {
		ch <- prometheus.MustNewConstMetric(selectableDesc, prometheus.GaugeValue, float64(len(set.Backends)), "backend")
		return
	}
	ch <- prometheus.MustNewConstMetric(selectableDesc, prometheus.GaugeValue, float64(len(set.Prefill)), "prefill")
	ch <- prometheus.MustNewConstMetric(selectableDesc, prometheus.GaugeValue, float64(len(set.Backends)), "decode")
}
