package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves the admin listener: liveness, readiness and metrics,
// which the kubelet and Prometheus reach on the pod IP. With withDebug
// (the admin address is on loopback and the config names no debug
// address) it serves /debug/* too, so a local setup keeps one port.
func (s *Server) adminHandler(withDebug bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready: discovery not synced or shutting down", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	if withDebug {
		return s.debugHandler(mux)
	}
	return mux
}

// listenerMetrics count, per proxy listener, the requests being served and
// those shed beyond proxy.maxConcurrentRequests.
type listenerMetrics struct {
	active *prometheus.GaugeVec
	shed   *prometheus.CounterVec
}

func newListenerMetrics(reg prometheus.Registerer) *listenerMetrics {
	m := &listenerMetrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_listener_requests_active",
			Help: "Requests a proxy listener is serving, request bodies being read included.",
		}, []string{"listener"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_listener_requests_shed_total",
			Help: "Requests answered 503 because their listener served proxy.maxConcurrentRequests already.",
		}, []string{"listener"}),
	}
	reg.MustRegister(m.active, m.shed)
	return m
}

func (m *listenerMetrics) of(addr string) (prometheus.Gauge, prometheus.Counter) {
	return m.active.WithLabelValues(addr), m.shed.WithLabelValues(addr)
}
