package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tetherproxy/tether/sidecar/session"
)

// adminHandler serves the admin listener: liveness, readiness, metrics
// and a read-only view of one binding.
func (s *Server) adminHandler() http.Handler {
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
	mux.HandleFunc("GET /debug/bindings", s.debugBinding)
	return mux
}

// debugBinding answers GET /debug/bindings?pool=NAME&key=KEY with the
// binding of that session, looked up by the same hash the store holds
// and without refreshing it.
func (s *Server) debugBinding(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pool, key := q.Get("pool"), q.Get("key")
	if pool == "" || key == "" {
		http.Error(w, "pool and key query parameters are required", http.StatusBadRequest)
		return
	}
	if _, ok := s.sources[pool]; !ok {
		http.Error(w, "unknown pool "+pool, http.StatusNotFound)
		return
	}
	b, ok, err := s.store.Peek(r.Context(), session.StoreKey(pool, key))
	if err != nil {
		http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !ok {
		http.Error(w, "no binding", http.StatusNotFound)
		return
	}
	out := struct {
		Backend    string `json:"backend"`
		Prefill    string `json:"prefill,omitempty"`
		ExpiresAt  string `json:"expiresAt"`
		Generation uint64 `json:"generation"`
		KeyHash    string `json:"keyHash"`
	}{b.Pod, b.PrefillPod, b.ExpiresAt.UTC().Format(time.RFC3339Nano), b.Gen, session.StoreKey(pool, key)}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}
