package responses

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Responses API routing metrics of a process; the
// resolver takes its pool's children once.
type Metrics struct {
	// Lost counts requests answered 404 because the backend that holds
	// their response is no longer selectable (tether_responses_lost_total).
	Lost *prometheus.CounterVec // pool
	// Routed counts requests that named a stored response, by result:
	// "pinned" (sent to the backend that holds it) or "unknown" (tether
	// had no binding for it, routed as any request; the backend answers).
	Routed *prometheus.CounterVec // pool, result
	// Learned counts answers that stored a response, by result: "bound"
	// (its id is bound to the backend), "no_id" (the answer carried no
	// id tether could read), "store_error" (the binding failed).
	Learned *prometheus.CounterVec // pool, result
}

// Result labels.
const (
	Pinned     = "pinned"
	Unknown    = "unknown"
	Bound      = "bound"
	NoID       = "no_id"
	StoreError = "store_error"
)

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_responses_lost_total",
			Help: "Responses API requests answered 404 because the backend that stored their response is no longer available.",
		}, []string{"pool"}),
		Routed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_responses_routed_total",
			Help: "Responses API requests that named a stored response (previous_response_id or /v1/responses/{id}), by result (pinned, unknown).",
		}, []string{"pool", "result"}),
		Learned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_responses_learned_total",
			Help: "Stored responses whose id tether read from the answer, by result (bound, no_id, store_error).",
		}, []string{"pool", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Lost, m.Routed, m.Learned)
	}
	return m
}
